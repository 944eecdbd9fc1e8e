package main

import (
	"fmt"

	"github.com/berthd/berth/config"
	"github.com/spf13/cobra"
)

func validateCmd(configPath *string) *cobra.Command {
	return &cobra.Command{
		Use:   "validate",
		Short: "Check a configuration file against this host",
		Long: `Check the agent file: every key, type, unit and limit, and the limits
against this host (CPUs online, block devices). Every problem is printed as
FILE:LINE:COL: key: message.

Exit status: 0 when valid, 2 when not.`,
		Example: `  berth validate --config /etc/berth/berth.toml`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(*configPath, config.LocalHost())
			if err != nil {
				return configError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: valid: %d connectors, %d groups, %d jobs\n", *configPath, len(cfg.Connectors), len(cfg.Groups), len(cfg.Jobs()))
			return nil
		},
	}
}
