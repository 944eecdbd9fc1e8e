package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/workload"
	"github.com/spf13/cobra"
)

// connectorInfo is one stored connector as "berth connectors --json"
// prints it.
type connectorInfo struct {
	Name       string   `json:"name"`
	Tasks      int      `json:"tasks"`
	Group      string   `json:"group,omitempty"`
	Run        bool     `json:"run"`        // has its own job ([connector.run])
	Jobs       []string `json:"jobs"`       // job IDs, sorted
	Definition string   `json:"definition"` // the stored TOML text
}

func connectorsCmd(configPath *string) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "connectors",
		Short: "List the connectors stored in the cluster",
		Long: `List the connectors stored in the cluster: a table NAME TASKS GROUP JOBS,
JOBS being how many jobs the connector has (its own job, if it has a [run],
and its tasks). A stored definition that does not validate on this host is
reported on standard error and makes the exit status 1; the others are
printed.`,
		Example: `  berth connectors
  berth connectors --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host := host.Local()
			var conns, groups map[string][]byte
			err := withStore(cmd.Context(), *configPath, host, func(ctx context.Context, c *cluster.Client) (err error) {
				if conns, err = c.Connectors(ctx); err != nil {
					return err
				}
				groups, err = c.Groups(ctx)
				return err
			})
			if err != nil {
				return err
			}
			w, bad := workload.Parse(conns, groups, host)
			jobs := map[string][]string{}
			for _, j := range w.Jobs(time.Second) {
				jobs[j.Connector] = append(jobs[j.Connector], j.ID)
			}
			out := make([]connectorInfo, 0, len(w.Connectors))
			for _, k := range w.Connectors {
				ids := jobs[k.Name]
				if ids == nil {
					ids = []string{}
				}
				out = append(out, connectorInfo{Name: k.Name, Tasks: k.Tasks, Group: k.Group, Run: k.Run != nil,
					Jobs: ids, Definition: string(conns[k.Name])})
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), out)
			} else {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tTASKS\tGROUP\tJOBS")
				for _, k := range out {
					group := k.Group
					if group == "" {
						group = "-"
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", k.Name, k.Tasks, group, len(k.Jobs))
				}
				tw.Flush()
			}
			if bad != nil {
				return fmt.Errorf("stored definitions that do not validate on this host:\n%v", bad)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: name, tasks, group, run, jobs, definition")
	return c
}
