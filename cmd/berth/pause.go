package main

import (
	"github.com/berthd/berth/spec"
	"github.com/spf13/cobra"
)

func pauseCmd(configPath *string) *cobra.Command {
	return &cobra.Command{
		Use:   "pause CONNECTOR",
		Short: "Pause a connector: stop its jobs on every host until resume",
		Long: `Pause a connector (Kafka Connect's PUT /connectors/{name}/pause). Its target
state "paused" is stored in the cluster with its definition, so it holds
on every host, across agent restarts and when its jobs move to another
host. Every agent that runs one of its jobs stops it (kill_signal, stop_timeout,
then the whole cgroup killed), removes its cgroup and releases its claim;
the job shows "paused" in berth status and PAUSED in the Connect-shaped
status. Each agent logs the pause with who asked.

The store is the one --config names, as for berth apply.`,
		Example: `  berth pause orders-sink
  berth resume orders-sink`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setTarget(cmd, *configPath, args[0], spec.TargetPaused,
				"paused: the agents that run its jobs stop them and remove their cgroups; berth resume "+args[0]+" runs them again")
		},
	}
}
