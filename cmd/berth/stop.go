package main

import (
	"github.com/berthd/berth/spec"
	"github.com/spf13/cobra"
)

func stopCmd(configPath *string) *cobra.Command {
	return &cobra.Command{
		Use:   "stop CONNECTOR",
		Short: "Stop a connector (KIP-875): its jobs stopped on every host, no tasks until resume",
		Long: `Stop a connector (Kafka Connect's PUT /connectors/{name}/stop, KIP-875). As
berth pause, its jobs are stopped on every host and their cgroups removed,
and the target state "stopped" holds across agent restarts and
reassignment; in the Connect-shaped views the connector is STOPPED and has
no tasks. Its definition stays in the store: berth resume runs it again.

This stops a connector, not the agent: the agent itself stops with
systemctl stop berth (or SIGTERM).

The store is the one --config names, as for berth apply.`,
		Example: `  berth stop orders-sink
  berth resume orders-sink`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setTarget(cmd, *configPath, args[0], spec.TargetStopped,
				"stopped: the agents that run its jobs stop them and remove their cgroups; berth resume "+args[0]+" runs them again")
		},
	}
}
