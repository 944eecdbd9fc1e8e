package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/workload"
	"github.com/spf13/cobra"
)

func restartCmd(configPath *string) *cobra.Command {
	var includeTasks, onlyFailed bool
	c := &cobra.Command{
		Use:   "restart JOB|CONNECTOR",
		Short: "Restart a job, or a connector and its tasks, where they run",
		Long: `Restart one job, or a connector (Kafka Connect's POST
/connectors/{name}/restart with KIP-745's includeTasks and onlyFailed, and
POST /connectors/{name}/tasks/{id}/restart).

JOB is a job ID: a connector's own job (its name) or a task
("<connector>-<n>"). CONNECTOR restarts the connector's own job and, with
--include-tasks, each of its tasks. With --only-failed a job is restarted
only if it is FAILED (it could not start, or it exited non-zero, was killed
by a signal or OOM-killed, and its restart policy did not restart it) when
its agent handles the request.

The request is stored in the cluster; the agent that runs each job carries
it out once, in the usual order (stop with stop_timeout, remove the cgroup,
release the claim; claim, make the cgroup, start), and logs it with who
asked. No other job is touched. A job of a paused or stopped connector is
not restarted.

The store is the one --config names, as for berth apply.`,
		Example: `  berth restart orders-sink-1
  berth restart orders-sink --include-tasks
  berth restart orders-sink --include-tasks --only-failed`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			host := host.Local()
			var connector string
			var jobs []string
			err := withStore(cmd.Context(), *configPath, host, func(ctx context.Context, c *cluster.Client) error {
				conns, err := c.Connectors(ctx)
				if err != nil {
					return err
				}
				groups, err := c.Groups(ctx)
				if err != nil {
					return err
				}
				wl, _ := workload.Parse(conns, groups, host)
				connector, jobs, err = restartTargets(wl, name, includeTasks)
				if err != nil {
					return err
				}
				return c.RequestRestarts(ctx, connector, jobs, onlyFailed, requester(), time.Now())
			})
			var ae *argsError
			switch {
			case errors.As(err, &ae):
				return usageError("%s", ae.msg)
			case errors.Is(err, cluster.ErrNotFound):
				return fmt.Errorf("connector %q was deleted meanwhile", connector)
			case err != nil:
				return err
			}
			cond := ""
			if onlyFailed {
				cond = ", each only if it is FAILED then"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restart requested: %s (carried out by the agent that runs each%s)\n", strings.Join(jobs, ", "), cond)
			return nil
		},
	}
	c.Flags().BoolVar(&includeTasks, "include-tasks", false, "with CONNECTOR: restart its tasks too")
	c.Flags().BoolVar(&onlyFailed, "only-failed", false, "restart only the jobs that are FAILED")
	return c
}

// restartTargets resolves name against wl: a connector (its own job, and
// with includeTasks its tasks) or one job. It returns the connector and
// the job IDs to restart, or an error saying why there are none.
func restartTargets(wl *spec.Workload, name string, includeTasks bool) (string, []string, error) {
	for _, c := range wl.Connectors {
		if c.Name != name {
			continue
		}
		var jobs []string
		if c.Run != nil {
			jobs = append(jobs, c.Name)
		}
		if includeTasks {
			for i := 0; i < c.Tasks; i++ {
				jobs = append(jobs, spec.TaskID(c.Name, i))
			}
		}
		if len(jobs) == 0 {
			return "", nil, &argsError{fmt.Sprintf("connector %s has no job of its own ([connector.run]); add --include-tasks to restart its %d tasks", name, c.Tasks)}
		}
		return c.Name, jobs, nil
	}
	for _, j := range wl.Jobs(0) {
		if j.ID == name {
			if includeTasks {
				return "", nil, &argsError{fmt.Sprintf("--include-tasks needs a CONNECTOR; %s is a task of %s", name, j.Connector)}
			}
			return j.Connector, []string{j.ID}, nil
		}
	}
	var names []string
	for _, c := range wl.Connectors {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return "", nil, fmt.Errorf("no connector or job named %q in the cluster (connectors: %s)", name, strings.Join(names, ", "))
}
