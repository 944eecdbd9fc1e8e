package main

import (
	"github.com/berthd/berth/spec"
	"github.com/spf13/cobra"
)

func resumeCmd(configPath *string) *cobra.Command {
	return &cobra.Command{
		Use:   "resume CONNECTOR",
		Short: "Resume a paused or stopped connector: its jobs run again",
		Long: `Resume a connector (Kafka Connect's PUT /connectors/{name}/resume): its
target state becomes "running" in the cluster store, and every agent that
is assigned one of its jobs claims it, makes its cgroup and starts it.
Resuming a running connector changes nothing.

The store is the one --config names, as for berth apply.`,
		Example: `  berth resume orders-sink`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setTarget(cmd, *configPath, args[0], spec.TargetRunning,
				"running: the agents assigned its jobs start them")
		},
	}
}
