package main

import (
	"context"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// completeTimeout bounds one completion's call to the agent: a shell waits
// for it on every TAB.
const completeTimeout = 2 * time.Second

// setupCompletion makes cobra's completion (berth completion SHELL, and
// the hidden __complete command the scripts call) know berth's arguments:
// --config completes *.toml files, and every positional argument that a
// command's Use names JOB, CONNECTOR or JOB|CONNECTOR completes from the
// running agent (GET /v1/jobs, GET /connectors at --addr when the command
// has that flag,
// else at agent.listen of --config). A command that sets its own
// ValidArgsFunction keeps it. When no agent answers, nothing is offered
// and nothing is printed.
func setupCompletion(root *cobra.Command, configPath *string) {
	_ = root.RegisterFlagCompletionFunc("config", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"toml"}, cobra.ShellCompDirectiveFilterFileExt
	})
	// berth completion SHELL with a shell cobra has no script for is a bad
	// command line (exit 2) naming the shells it has, not cobra's help.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			var shells []string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					shells = append(shells, sub.Name())
				}
			}
			return usageError("unknown shell %q (allowed: %s)", args[0], strings.Join(shells, ", "))
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.ValidArgsFunction == nil {
			if places := placeholders(c.Use); hasRemote(places) {
				c.ValidArgsFunction = remoteCompleter(places, configPath)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// placeholders returns the positional argument names of a Use line
// ("logs JOB" -> [JOB]; "restart [-f] JOB..." -> [JOB...]), skipping the
// command name, flags and the value a flag takes ("apply -f FILE" -> []).
func placeholders(use string) []string {
	words := strings.Fields(use)
	var out []string
	for i := 1; i < len(words); i++ {
		w := strings.Trim(words[i], "[]")
		if strings.HasPrefix(w, "-") {
			// "--to MEMBER" and "[--man DIR]" take a value, "[--wait]" none.
			closed := strings.HasPrefix(words[i], "[") && strings.HasSuffix(words[i], "]")
			if !closed && !strings.Contains(w, "=") && i+1 < len(words) && !strings.HasPrefix(words[i+1], "[") && isUpper(strings.TrimSuffix(words[i+1], "]")) {
				i++ // the flag's value
			}
			continue
		}
		name, ok := strings.TrimSuffix(w, "..."), true
		for _, alt := range strings.Split(name, "|") {
			ok = ok && isUpper(alt)
		}
		if ok {
			out = append(out, w)
		}
	}
	return out
}

// kinds returns which names a placeholder takes: "JOB|CONNECTOR..." ->
// jobs and connectors.
func kinds(place string) (jobs, connectors bool) {
	for _, alt := range strings.Split(strings.TrimSuffix(place, "..."), "|") {
		switch alt {
		case "JOB":
			jobs = true
		case "CONNECTOR":
			connectors = true
		}
	}
	return jobs, connectors
}

func isUpper(s string) bool {
	return s != "" && strings.ToUpper(s) == s && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == ""
}

func hasRemote(places []string) bool {
	for _, p := range places {
		if j, c := kinds(p); j || c {
			return true
		}
	}
	return false
}

// remoteCompleter completes the argument at position len(args) from the
// agent's job IDs or connector names, by prefix, leaving out names already
// given; a final "NAME..." placeholder repeats.
func remoteCompleter(places []string, configPath *string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		none := cobra.ShellCompDirectiveNoFileComp
		place := ""
		switch last := places[len(places)-1]; {
		case len(args) < len(places):
			place = places[len(args)]
		case strings.HasSuffix(last, "..."):
			place = last
		default:
			return nil, none
		}
		wantJobs, wantConnectors := kinds(place)
		if !wantJobs && !wantConnectors {
			return nil, cobra.ShellCompDirectiveDefault
		}
		addr := ""
		if f := cmd.Flags().Lookup("addr"); f != nil {
			addr = f.Value.String()
		}
		c, err := agentClient(io.Discard, *configPath, addr)
		if err != nil {
			return nil, none
		}
		parent := cmd.Context()
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancel := context.WithTimeout(parent, completeTimeout)
		defer cancel()
		c.HTTP.Timeout = completeTimeout
		var names []string
		if wantJobs {
			jobs, err := c.Jobs(ctx)
			if err != nil {
				return nil, none
			}
			for _, j := range jobs {
				names = append(names, j.ID)
			}
		}
		if wantConnectors {
			conns, err := c.Connectors(ctx)
			if err != nil {
				return nil, none
			}
			names = append(names, conns...)
		}
		sort.Strings(names)
		names = slices.Compact(names) // a connector's own job has its name
		given := map[string]bool{}
		for _, a := range args {
			given[a] = true
		}
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) && !given[n] {
				out = append(out, n)
			}
		}
		return out, none
	}
}
