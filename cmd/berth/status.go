package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthd/berth/api"
	"github.com/spf13/cobra"
)

func statusCmd(configPath *string) *cobra.Command {
	var addr string
	var asJSON, wide bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "status",
		Short: "Print the jobs and sharing groups of a running agent",
		Long: `Print the jobs of a running agent (its GET /v1/jobs): state, pid, uptime,
restarts, CPU time against its CPU limit (cores), memory against its limit,
OOM kills, last exit, and in the last column the reason a job is failed or
waiting, or why its new definition is held back. Then its sharing groups
(GET /v1/groups): each group's jobs here and their usage together against
the group's limits. --wide adds each job's fencing token (of its current or
last run, BERTH_FENCING_TOKEN), cgroup and command.

The agent is found at --addr, else at agent.listen of --config, over https
when its agent.web_config_file turns TLS on, presenting the [agent.client]
CA, client certificate and basic-auth credentials of --config. A file that
does not validate (a refused reload is when status is most needed) is still
read for these keys, with a warning. Both requests together may take
--request-timeout (10 s; GET /v1/jobs takes seconds at 10,000 jobs).`,
		Example: `  berth status
  berth status --wide
  berth status --addr 10.0.0.7:9750 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := agentClient(cmd.ErrOrStderr(), *configPath, addr)
			if err != nil {
				return err
			}
			ctx, cancel, err := requestContext(cmd.Context(), cl, timeout)
			if err != nil {
				return err
			}
			defer cancel()
			jobs, err := cl.Jobs(ctx)
			if err != nil {
				return reachError(err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), jobs)
				return nil
			}
			now := time.Now()
			printJobs(cmd.OutOrStdout(), jobs, wide, now)
			if groups, err := cl.Groups(ctx); err == nil && len(groups) > 0 {
				fmt.Fprintln(cmd.OutOrStdout())
				printGroups(cmd.OutOrStdout(), groups)
			}
			return nil
		},
	}
	c.Flags().StringVar(&addr, "addr", "", "agent address HOST:PORT or URL (default: agent.listen of --config)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the agent's JSON (GET /v1/jobs)")
	c.Flags().BoolVarP(&wide, "wide", "w", false, "also print each job's fencing token, cgroup and command")
	requestTimeoutFlag(c, &timeout)
	return c
}

// printJobs prints one row per job. STATE is the bare state; why a job is
// failed or waiting, or why its new definition is held back, is the last
// column, so that a long reason never shifts the others.
func printJobs(w io.Writer, jobs []api.Job, wide bool, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "JOB\tKIND\tGROUP\tSTATE\tPID\tUPTIME\tRESTARTS\tCPU\tCPU LIMIT\tMEMORY\tMEM LIMIT\tOOM\tLAST EXIT\t"
	if wide {
		head += "TOKEN\tCGROUP\tCOMMAND\t"
	}
	fmt.Fprintln(tw, head+"REASON")
	for _, j := range jobs {
		var gu *api.GroupUsage
		if j.Usage != nil {
			gu = &j.Usage.GroupUsage
		}
		cpu, cpuLimit, mem, limit, oom := usageCells(j.Limits.CPU, gu)
		pid := "-"
		if j.PID > 0 {
			pid = fmt.Sprint(j.PID)
		}
		uptime := "-"
		if j.StartedAt != nil && j.PID > 0 {
			uptime = humanDuration(now.Sub(*j.StartedAt))
		}
		last := "-"
		if j.LastExit != nil {
			last = j.LastExit.Reason
		}
		var reasons []string
		if j.Reason != "" {
			reasons = append(reasons, j.Reason)
		}
		if j.UpdateBlocked != "" {
			reasons = append(reasons, j.UpdateBlocked)
		}
		reason := "-"
		if len(reasons) > 0 {
			reason = oneLine(strings.Join(reasons, "; "))
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t", j.ID, j.Kind, dash(j.Group),
			j.State, pid, uptime, j.Restarts, cpu, cpuLimit, mem, limit, oom, last)
		if wide {
			token := "-"
			if j.FencingToken != 0 {
				token = strconv.FormatUint(j.FencingToken, 10)
			}
			row += token + "\t" + j.Cgroup + "\t" + oneLine(strings.Join(j.Command, " ")) + "\t"
		}
		fmt.Fprintln(tw, row+reason)
	}
	tw.Flush()
}

// printGroups prints one row per sharing group: its jobs here and their
// usage together against the group's limits.
func printGroups(w io.Writer, groups []api.Group) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tJOBS\tCPU\tCPU LIMIT\tMEMORY\tMEM LIMIT\tPIDS\tPIDS LIMIT\tOOM\tIO READ\tIO WRITE\tCGROUP")
	for _, g := range groups {
		cpu, cpuLimit, mem, memLimit, oom := usageCells(g.Limits.CPU, g.Usage)
		pids, pidsLimit, rd, wr := "-", "-", "-", "-"
		if u := g.Usage; u != nil {
			pids = fmt.Sprint(u.Pids)
			if u.PidsLimit > 0 {
				pidsLimit = fmt.Sprint(u.PidsLimit)
			}
			rd, wr = bytesHuman(u.IOReadBytes), bytesHuman(u.IOWriteBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Name, strings.Join(g.Jobs, ","),
			cpu, cpuLimit, mem, memLimit, pids, pidsLimit, oom, rd, wr, g.Cgroup)
	}
	tw.Flush()
}

// usageCells are the CPU, CPU LIMIT, MEMORY, MEM LIMIT and OOM cells of a
// job or group whose configured CPU limit is cpuLimit (cores; 0: none) and
// whose usage is u (nil: not read): "-" where unknown. The limits read
// from the cgroup, when there are, are shown over the configured one.
func usageCells(cpuLimit float64, u *api.GroupUsage) (cpu, cpuLim, mem, memLim, oom string) {
	cpu, cpuLim, mem, memLim, oom = "-", "-", "-", "-", "-"
	if cpuLimit > 0 {
		cpuLim = strconv.FormatFloat(cpuLimit, 'f', -1, 64)
	}
	if u == nil {
		return cpu, cpuLim, mem, memLim, oom
	}
	cpu = fmt.Sprintf("%.1fs", u.CPUSeconds)
	if u.CPULimitCores > 0 {
		cpuLim = strconv.FormatFloat(u.CPULimitCores, 'f', -1, 64)
	}
	mem = bytesHuman(u.MemoryBytes)
	if u.MemoryLimitBytes > 0 {
		memLim = bytesHuman(u.MemoryLimitBytes)
	}
	return cpu, cpuLim, mem, memLim, fmt.Sprint(u.OOMKills)
}

// humanDuration is d rounded for a table: "45s", "12m03s", "5h02m", "3d04h".
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// oneLine keeps a table row on one line: newlines become "; ".
func oneLine(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")
}
