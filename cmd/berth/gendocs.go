package main

import (
	"fmt"
	"os"

	"github.com/berthd/berth/internal/docgen"
	"github.com/spf13/cobra"
)

// gendocsCmd writes the generated documentation. It is hidden: the build
// runs it (make docs, make man, the .deb), not operators.
func gendocsCmd() *cobra.Command {
	var manDir, configMD string
	c := &cobra.Command{
		Use:    "gendocs [--man DIR] [--config-md FILE]",
		Short:  "Write the man pages and the configuration reference",
		Hidden: true,
		Long: `Write berth(1), one page per command and berth.toml(5) into DIR
(--man), and the configuration reference in Markdown to FILE (--config-md,
the repository keeps it as docs/config.md). Both are generated from the
command tree and from the key table of package config.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if manDir == "" && configMD == "" {
				return usageError("give --man DIR, --config-md FILE or both\nUsage: %s", cmd.UseLine())
			}
			if configMD != "" {
				f, err := os.Create(configMD)
				if err != nil {
					return err
				}
				if err := docgen.ConfigMarkdown(f); err != nil {
					f.Close()
					return fmt.Errorf("write %s: %w", configMD, err)
				}
				if err := f.Close(); err != nil {
					return fmt.Errorf("write %s: %w", configMD, err)
				}
			}
			if manDir != "" {
				date, err := docgen.ManDate()
				if err != nil {
					return err
				}
				return docgen.ManPages(cmd.Root(), manDir, date, "berth "+version)
			}
			return nil
		},
	}
	c.Flags().StringVar(&manDir, "man", "", "directory to write the man pages into")
	c.Flags().StringVar(&configMD, "config-md", "", "file to write the configuration reference into")
	return c
}
