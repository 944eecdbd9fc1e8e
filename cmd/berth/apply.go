package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/supervisor"
)

// storeTimeout bounds one CLI command's work against the cluster store.
const storeTimeout = 30 * time.Second

// runApply stores the [[group]] and [[connector]] blocks of a file in the
// cluster store: "berth apply [--config FILE] -f connectors.toml [--dry-run]
// [--prune=true]". The file is validated first (every error printed as
// FILE:LINE:COL: key: message, exit 1, nothing stored); then each definition
// is created, updated (only when its text changed) or left unchanged and,
// with --prune (the default), stored connectors and groups that the file
// does not define are deleted. It prints one line per definition
// ("created connector/orders") and exits 0, or 1 on any error.
func runApply(args []string) int {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	config := fs.String("config", defaultConfig, "agent configuration file (for [cluster] and agent.data_dir)")
	file := fs.String("f", "", "connectors file of [[group]] and [[connector]] blocks (\"-\" for standard input)")
	dryRun := fs.Bool("dry-run", false, "print what would change, store nothing")
	prune := fs.Bool("prune", true, "delete stored connectors and groups that the file does not define")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *file == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: berth apply [--config FILE] -f connectors.toml [--dry-run] [--prune=false]")
		return 2
	}
	var data []byte
	var err error
	if *file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "berth apply: %v\n", err)
		return 1
	}
	name := *file
	if name == "-" {
		name = "<stdin>"
	}
	defs, err := limits.Definitions(name, data)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		fmt.Fprintf(os.Stderr, "berth apply: %s is not valid; nothing was stored\n", name)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	c, err := connectCluster(ctx, *config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "berth apply: %v\n", err)
		return 1
	}
	defer c.Close()
	var plan supervisor.Plan
	if *dryRun {
		plan, err = supervisor.PlanWorkload(ctx, c, defs, *prune)
	} else {
		plan, err = supervisor.ApplyWorkload(ctx, c, defs, *prune)
	}
	wrote := len(plan.Created)+len(plan.Updated)+len(plan.Deleted) > 0
	if err == nil || *dryRun || wrote {
		printPlan(plan, *dryRun)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "berth apply: %v\n", err)
		if !*dryRun && !wrote {
			fmt.Fprintln(os.Stderr, "berth apply: nothing was stored")
		}
		return 1
	}
	return 0
}

// printPlan prints one line per definition, then a summary.
func printPlan(p supervisor.Plan, dryRun bool) {
	suffix := ""
	if dryRun {
		suffix = " (dry run)"
	}
	for _, l := range []struct {
		verb  string
		names []string
	}{{"created", p.Created}, {"updated", p.Updated}, {"deleted", p.Deleted}, {"unchanged", p.Unchanged}} {
		for _, n := range l.names {
			fmt.Printf("%s %s%s\n", l.verb, n, suffix)
		}
	}
	fmt.Printf("%d created, %d updated, %d deleted, %d unchanged%s\n", len(p.Created), len(p.Updated), len(p.Deleted), len(p.Unchanged), suffix)
}
