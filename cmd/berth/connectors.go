package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/supervisor"
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

// runConnectors prints the connectors stored in the cluster store: "berth
// connectors [--config FILE] [--json]", a table NAME TASKS GROUP JOBS (JOBS:
// how many jobs the connector has: its own job, if it has a [run], and its
// tasks). A stored definition that does not validate on this host is
// reported on standard error and makes the exit status 1; the others are
// printed.
func runConnectors(args []string) int {
	fs := flag.NewFlagSet("connectors", flag.ContinueOnError)
	config := fs.String("config", defaultConfig, "agent configuration file (for [cluster] and agent.data_dir)")
	asJSON := fs.Bool("json", false, "print JSON: name, tasks, group, run, jobs, definition")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var conns, groups map[string][]byte
	if code := withStore("connectors", *config, func(ctx context.Context, c *cluster.Client) (err error) {
		if conns, err = c.Connectors(ctx); err != nil {
			return err
		}
		groups, err = c.Groups(ctx)
		return err
	}); code != 0 {
		return code
	}
	w, bad := supervisor.ParseWorkload(conns, groups)
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
	if *asJSON {
		printJSON(out)
	} else {
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
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
		fmt.Fprintf(os.Stderr, "berth connectors: stored definitions that do not validate on this host:\n%v\n", bad)
		return 1
	}
	return 0
}
