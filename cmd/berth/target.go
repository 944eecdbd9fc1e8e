package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
	"github.com/spf13/cobra"
)

// requester names who runs this command, for the agents' logs and status:
// "cli <user>@<host>".
func requester() string {
	name := "?"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	return "cli " + name + "@" + host
}

// setTarget stores connector's target state in the cluster store of the
// agent file path (as berth apply reaches it) and says what follows.
func setTarget(cmd *cobra.Command, path, connector string, state spec.TargetState, next string) error {
	err := withStore(cmd.Context(), path, host.Local(), func(ctx context.Context, c *cluster.Client) error {
		return c.SetTarget(ctx, connector, cluster.Target{State: state, By: requester(), At: time.Now().UTC()})
	})
	if errors.Is(err, cluster.ErrNotFound) {
		return fmt.Errorf("no connector %q in the cluster (berth connectors lists them)", connector)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "connector %s: %s\n", connector, next)
	return nil
}
