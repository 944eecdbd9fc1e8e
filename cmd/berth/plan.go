package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// printHostPlan prints what the agent of cfg runs on this host as the only
// member of its cluster (the assignment a one-host agent computes): its
// jobs with their resolved limits, its sharing groups, and the file's jobs
// it does not run, with the reason.
func printHostPlan(w io.Writer, cfg *config.Config, host *host.Host) {
	conns := make([]assign.Connector, 0, len(cfg.Connectors))
	for _, c := range cfg.Connectors {
		conns = append(conns, assign.Connector{Name: c.Name, Run: c.Run != nil, Tasks: c.Tasks, Group: c.Group})
	}
	me := assign.Member{ID: cfg.Agent.ID, Protocol: cfg.Cluster.Protocol, Connectors: cfg.Static.Connectors, Tasks: cfg.Static.Tasks}
	a := assign.Compute(assign.Input{Members: []assign.Member{me}, Connectors: conns})
	run := map[string]bool{}
	for _, id := range a.Members[me.ID] {
		run[id] = true
	}
	var resolve limits.DeviceResolver
	if host != nil {
		resolve = host.ResolveDevice
	}
	how := "the jobs it declares in [static]"
	switch {
	case cfg.Cluster.Protocol == spec.ProtocolBalanced:
		how = "balanced protocol: every job"
	case len(cfg.Static.Connectors)+len(cfg.Static.Tasks) == 0:
		how = "empty [static], a standby: every job"
	}
	where := ""
	if len(cfg.Cluster.Endpoints) > 0 {
		where = ", were it the only member of cluster " + strconv.Quote(cfg.Cluster.Name) + " (the leader's assignment decides)"
	}
	jobs := cfg.Jobs()
	fmt.Fprintf(w, "\nagent %s runs %s on this host (%s)%s:\n", cfg.Agent.ID, plural(len(run), "job"), how, where)
	groupsUsed := map[string][]string{}
	if len(run) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  JOB\tKIND\tGROUP\tCPU\tMEMORY\tPIDS\tIO\tOTHER\tCOMMAND")
		for _, j := range jobs {
			if !run[j.ID] {
				continue
			}
			if j.Group != "" {
				groupsUsed[j.Group] = append(groupsUsed[j.Group], j.ID)
			}
			cpu, mem, pids, iol, other := limitCells(j.Process.Limits, resolve)
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Kind, dash(j.Group), cpu, mem, pids, iol, other, commandLine(j.Process))
		}
		tw.Flush()
	}
	if len(groupsUsed) > 0 {
		fmt.Fprintln(w, "\nsharing groups (their limits cap the sum of their jobs):")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  GROUP\tCPU\tMEMORY\tPIDS\tIO\tOTHER\tJOBS")
		for _, g := range cfg.Groups {
			ids, ok := groupsUsed[g.Name]
			if !ok {
				continue
			}
			cpu, mem, pids, iol, other := limitCells(g.Limits, resolve)
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Name, cpu, mem, pids, iol, other, strings.Join(ids, ","))
		}
		tw.Flush()
	}
	var idle []string
	for _, j := range jobs {
		if !run[j.ID] {
			idle = append(idle, j.ID)
		}
	}
	if len(idle) > 0 {
		fmt.Fprintf(w, "\nnot run by this agent (%s):\n", plural(len(idle), "job"))
		for _, id := range idle {
			fmt.Fprintf(w, "  %s: %s\n", id, a.Unassigned[id])
		}
	}
}

// ownColumn names the limits that limitCells shows in a column of their
// own (CPU with its period, MEMORY with its swap, PIDS, IO); every other
// limit is in OTHER.
var ownColumn = map[string]bool{"cpu": true, "cpu_period": true, "memory": true, "memory_swap": true, "pids": true, "io": true}

// limitCells formats limits as the kernel gets them: cores with the CFS
// quota and period in µs, bytes (with the binary size beside), pids, io
// rates per whole disk (major:minor), and the rest as key=value.
func limitCells(l limits.Limits, resolve limits.DeviceResolver) (cpu, mem, pids, iol, other string) {
	cpu, mem, pids, iol = "-", "-", "-", "-"
	if l.CPU > 0 {
		cpu = fmt.Sprintf("%s cores = %d/%d µs", strconv.FormatFloat(l.CPU, 'f', -1, 64), l.QuotaMicros(), l.Period().Microseconds())
	}
	if l.Memory > 0 {
		mem = exactBytes(l.Memory)
	}
	if l.Pids > 0 {
		pids = strconv.FormatInt(l.Pids, 10)
	}
	var ios []string
	for _, io := range l.IO {
		dev := io.Device
		if resolve != nil {
			if d, err := resolve(io.Device); err == nil {
				dev = fmt.Sprintf("%s=%d:%d", io.Device, d.Major, d.Minor)
			}
		}
		var rates []string
		for _, r := range []struct {
			name string
			v    int64
			unit string
		}{{"rbps", io.ReadBPS, " B/s"}, {"wbps", io.WriteBPS, " B/s"}, {"riops", io.ReadIOPS, ""}, {"wiops", io.WriteIOPS, ""}} {
			if r.v > 0 {
				rates = append(rates, fmt.Sprintf("%s %d%s", r.name, r.v, r.unit))
			}
		}
		ios = append(ios, dev+" "+strings.Join(rates, " "))
	}
	if len(ios) > 0 {
		iol = strings.Join(ios, "; ")
	}
	// OTHER: every limit without a column of its own, as key=value from
	// the table of limits; the swap beside a memory limit, 0 when off.
	var o []string
	for _, k := range limits.Keys() {
		if !ownColumn[k.Name] {
			if v := k.Format(&l); v != "" {
				o = append(o, k.Name+"="+v)
			}
		}
	}
	if l.Memory > 0 {
		o = append(o, fmt.Sprintf("swap=%d", l.MemorySwap))
	}
	sort.Strings(o)
	other = "-"
	if len(o) > 0 {
		other = strings.Join(o, " ")
	}
	return cpu, mem, pids, iol, other
}

// exactBytes is "33554432 B (32.0MiB)": the exact count, and the size in
// binary units when it is at least 1 KiB.
func exactBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%d B (%s)", n, bytesHuman(uint64(n)))
}

// commandLine is argv as one line, quoting the arguments that need it.
func commandLine(p spec.Process) string {
	parts := make([]string, len(p.Command))
	for i, a := range p.Command {
		if a == "" || strings.ContainsAny(a, " \t\"'\\$`;|&<>()*?") {
			a = strconv.Quote(a)
		}
		parts[i] = a
	}
	s := strings.Join(parts, " ")
	if p.User != "" {
		s += "  (user " + p.User + ")"
	}
	return s
}

// dash is s, or "-" when empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
