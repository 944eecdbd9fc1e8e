package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthd/berth/api"
	"github.com/spf13/cobra"
)

func statusCmd(configPath *string) *cobra.Command {
	var addr string
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Print the jobs of a running agent",
		Long: `Print the jobs of a running agent (its GET /v1/jobs): state, pid, restarts,
CPU time, memory against its limit, OOM kills, last exit and cgroup.

The agent is found at --addr, else at agent.listen of --config, over https
when its agent.web_config_file turns TLS on, presenting the [agent.client]
CA, client certificate and basic-auth credentials of --config. A file that
does not validate (a refused reload is when status is most needed) is still
read for these keys, with a warning.`,
		Example: `  berth status
  berth status --addr 10.0.0.7:9750 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := agentClient(cmd.ErrOrStderr(), *configPath, addr)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			jobs, err := client.Jobs(ctx)
			if err != nil {
				return fmt.Errorf("is the agent running? %w", err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), jobs)
				return nil
			}
			printJobs(cmd.OutOrStdout(), jobs)
			return nil
		},
	}
	c.Flags().StringVar(&addr, "addr", "", "agent address HOST:PORT or URL (default: agent.listen of --config)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the agent's JSON")
	return c
}

func printJobs(w io.Writer, jobs []api.Job) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tKIND\tGROUP\tSTATE\tPID\tRESTARTS\tCPU\tMEMORY\tLIMIT\tOOM\tLAST EXIT\tCGROUP")
	for _, j := range jobs {
		cpu, mem, limit, oom := "-", "-", "-", "-"
		if u := j.Usage; u != nil {
			cpu = fmt.Sprintf("%.1fs", u.CPUSeconds)
			mem = bytesHuman(u.MemoryBytes)
			if u.MemoryLimitBytes > 0 {
				limit = bytesHuman(u.MemoryLimitBytes)
			}
			oom = fmt.Sprint(u.OOMKills)
		}
		pid := "-"
		if j.PID > 0 {
			pid = fmt.Sprint(j.PID)
		}
		last := "-"
		if j.LastExit != nil {
			last = j.LastExit.Reason
		}
		state := string(j.State)
		if j.Reason != "" {
			state += " (" + j.Reason + ")"
		}
		group := j.Group
		if group == "" {
			group = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Kind, group,
			strings.TrimSpace(state), pid, j.Restarts, cpu, mem, limit, oom, last, j.Cgroup)
	}
	tw.Flush()
}
