package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/recommend"
	"github.com/berthd/berth/spec"
	"github.com/spf13/cobra"
)

func recommendCmd(configPath *string) *cobra.Command {
	var addr string
	var asJSON bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "recommend [JOB|CONNECTOR...]",
		Short: "Print limits sized from what the jobs used, as TOML to paste",
		Long: `Print recommended limits (cpu, memory and memory_high) for jobs of a running
agent (its GET /v1/recommendations), computed from the usage history the
agent keeps of every job it runs: CPU usage sampled every second, memory,
its peak (the kernel's watermark), the inactive page cache, OOM kills and
pressure stalls every 15 seconds, in histograms that decay as the Vertical
Pod Autoscaler's (a sample's weight halves every 24 hours), kept in
<data_dir>/usage-history across restarts and upgrades.

The rule: memory is the highest working set of the last 8 days plus 10 %,
rounded up to a readable size (never below a peak the job reached, at most
12.75 % above it); memory_high is the peak plus 3 %, below memory, where
the kernel enforces it (cgroup v2); cpu is the 99th percentile of
per-second CPU usage weighted by load, plus 15 %, so that a job idle most
of the time is sized for its bursts. Throttled seconds and OOM kills,
whose true demand the kernel hides, are counted at 1.2 times the limit.

JOB is a job ID, CONNECTOR a connector name: its own job and its tasks.
With no argument, every job of the agent. The output is, per connector, a
[connector.run.limits] table for its own job and a [connector.task.limits]
table for its tasks (one template, sized for the largest task), with the
evidence in comments: the window and number of samples, the peak and P90
of memory and CPU, the share of CFS periods throttled, OOM kills, pressure
stalls, what VPA's defaults would say from the same samples, and a note
when fewer than 24 hours of samples make the recommendation low
confidence. Limits the recommendation does not size (cpu_period, cpuset,
pids, io...) keep the values in force.

Applying stays manual: replace the connector's limits table in the agent
file with the one printed (berth validate accepts it), then berth reload:
limits change in place, the jobs keep running.

The agent is found as berth status finds it (--addr, else agent.listen of
--config, with its TLS and [agent.client] credentials).`,
		Example: `  berth recommend
  berth recommend orders-sink
  berth recommend orders-sink-0 orders-sink-1
  berth recommend orders-sink --json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := agentClient(cmd.ErrOrStderr(), *configPath, addr)
			if err != nil {
				return err
			}
			ctx, cancel, err := requestContext(cmd.Context(), cl, timeout)
			if err != nil {
				return err
			}
			defer cancel()
			var jobs, connectors []string
			if len(args) > 0 {
				all, err := cl.Jobs(ctx)
				if err != nil {
					return reachError(err)
				}
				jobs, connectors = classify(args, all)
			}
			recs, err := cl.Recommendations(ctx, jobs, connectors)
			if err != nil {
				return reachError(err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), recs)
				return nil
			}
			return printRecommendations(cmd.OutOrStdout(), recs, time.Now())
		},
	}
	c.Flags().StringVar(&addr, "addr", "", "agent address HOST:PORT or URL (default: agent.listen of --config)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the agent's JSON (GET /v1/recommendations)")
	requestTimeoutFlag(c, &timeout)
	return c
}

// classify splits names into job IDs and connector names: a name that is
// the connector of one of jobs is a connector (its own job and its
// tasks), any other a job ID.
func classify(names []string, jobs []api.Job) (ids, connectors []string) {
	for _, n := range names {
		if slices.ContainsFunc(jobs, func(j api.Job) bool { return j.Connector == n }) {
			connectors = append(connectors, n)
		} else {
			ids = append(ids, n)
		}
	}
	return ids, connectors
}

// printRecommendations writes recs as recommend.Render's TOML, after a
// comment line for each job that has no sample yet.
//
// Errors: no job of recs has a sample yet; those of w.
func printRecommendations(w io.Writer, recs api.Recommendations, now time.Time) error {
	var ts []recommend.Target
	for _, j := range recs.Jobs {
		if j.Recommendation == nil {
			fmt.Fprintf(w, "# %s: no usage samples yet (a job is sampled while it runs)\n", j.Job)
			continue
		}
		ts = append(ts, recommend.Target{Connector: j.Connector, Kind: spec.Kind(j.Kind), Current: j.Limits, Rec: *j.Recommendation})
	}
	if len(ts) == 0 {
		return errors.New("no job has usage samples yet: nothing to recommend")
	}
	return recommend.Render(w, ts, recs.Host, now)
}
