package main

import (
	"fmt"
	"io"
	"os"

	"github.com/berthd/berth/internal/docgen"
	"github.com/spf13/cobra"
)

// gendocsCmd writes the generated documentation. It is hidden: the build
// runs it (make docs, make man, the .deb), not operators.
func gendocsCmd() *cobra.Command {
	var manDir, configMD, metricsMD string
	c := &cobra.Command{
		Use:    "gendocs [--man DIR] [--config-md FILE] [--metrics-md FILE]",
		Short:  "Write the man pages and the configuration and metrics references",
		Hidden: true,
		Long: `Write berth(1), one page per command and berth.toml(5) into DIR
(--man), the configuration reference in Markdown to FILE (--config-md,
the repository keeps it as docs/config.md) and the metrics reference in
Markdown (--metrics-md, docs/metrics.md). They are generated from the
command tree, from the key table of package config and from the
descriptors of package metrics.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if manDir == "" && configMD == "" && metricsMD == "" {
				return usageError("give --man DIR, --config-md FILE, --metrics-md FILE or several\nUsage: %s", cmd.UseLine())
			}
			if configMD != "" {
				if err := writeDoc(configMD, docgen.ConfigMarkdown); err != nil {
					return err
				}
			}
			if metricsMD != "" {
				if err := writeDoc(metricsMD, docgen.MetricsMarkdown); err != nil {
					return err
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
	c.Flags().StringVar(&metricsMD, "metrics-md", "", "file to write the metrics reference into")
	return c
}

// writeDoc creates path and writes a generated document into it with gen.
func writeDoc(path string, gen func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := gen(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
