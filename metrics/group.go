package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// groupLabels are the labels of every per-group series.
var groupLabels = []string{"group"}

func groupDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(append([]string{}, groupLabels...), extra...), nil)
}

var (
	descGroupJobs      = groupDesc("berth_group_jobs", "Jobs of the sharing group run by this agent.")
	descGroupCPU       = groupDesc("berth_group_cpu_seconds_total", "CPU time of every job of the sharing group together, from the group cgroup's accounting, seconds.", "mode")
	descGroupCPULimit  = groupDesc("berth_group_cpu_limit_cores", "The sharing group's CPU quota divided by its period, cores; absent when unlimited.")
	descGroupThrottled = groupDesc("berth_group_cpu_throttled_seconds_total", "Time the sharing group's jobs were held back by the group's CPU quota, seconds.")
	descGroupMem       = groupDesc("berth_group_memory_bytes", "Memory charged to the sharing group's cgroup (its jobs together), bytes.")
	descGroupMemLimit  = groupDesc("berth_group_memory_limit_bytes", "The sharing group's hard memory limit, bytes; absent when unlimited.")
	descGroupOOM       = groupDesc("berth_group_oom_kills_total", "Processes of the sharing group's jobs killed by the kernel's OOM killer.")
	descGroupPids      = groupDesc("berth_group_pids", "Tasks in the sharing group's cgroup and its jobs' (pids.current).")
	descGroupPidsLimit = groupDesc("berth_group_pids_limit", "The sharing group's pids.max; absent when unlimited.")
	descGroupIO        = groupDesc("berth_group_io_bytes_total", "Bytes the sharing group's jobs read from and wrote to block devices (v2 io.stat, v1 blkio.throttle.io_service_bytes_recursive).", "direction")
)

// groupCollector reads each sharing group's parent cgroup: its limits and
// the usage of its jobs together (CPU, memory, pids, I/O, OOM kills).
type groupCollector struct {
	log *slog.Logger
	mu  sync.Mutex
	// acc keeps each group's counters monotonic across the group's cgroup
	// being made anew (its jobs all stopped, then one started again).
	acc map[string]*groupAccount
}

type groupAccount struct {
	cpuUser, cpuSystem, throttled, oomKills, ioRead, ioWrite counter
}

func newGroupCollector(log *slog.Logger) *groupCollector {
	return &groupCollector{log: log, acc: map[string]*groupAccount{}}
}

// Update implements Collector. A group whose cgroup cannot be read is left
// out of this scrape and fails the collector; the others are reported.
func (c *groupCollector) Update(out Output, s Snapshot) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := make(map[string]bool, len(s.Groups))
	var errs []error
	for _, g := range s.Groups {
		keep[g.Name] = true
		out.Send(prometheus.MustNewConstMetric(descGroupJobs, prometheus.GaugeValue, float64(g.Jobs), g.Name))
		if g.Cgroup == nil {
			continue
		}
		st, err := g.Cgroup.FullUsage()
		if err != nil {
			errs = append(errs, fmt.Errorf("group %s: %w", g.Name, err))
			continue
		}
		acc, ok := c.acc[g.Name]
		if !ok {
			acc = &groupAccount{}
			c.acc[g.Name] = acc
		}
		out.Send(prometheus.MustNewConstMetric(descGroupCPU, prometheus.CounterValue, acc.cpuUser.observe(st.CPUUserSeconds), g.Name, "user"))
		out.Send(prometheus.MustNewConstMetric(descGroupCPU, prometheus.CounterValue, acc.cpuSystem.observe(st.CPUSystemSeconds), g.Name, "system"))
		out.Send(prometheus.MustNewConstMetric(descGroupThrottled, prometheus.CounterValue, acc.throttled.observe(st.ThrottledSeconds), g.Name))
		out.Send(prometheus.MustNewConstMetric(descGroupOOM, prometheus.CounterValue, acc.oomKills.observe(float64(st.OOMKills)), g.Name))
		out.Send(prometheus.MustNewConstMetric(descGroupIO, prometheus.CounterValue, acc.ioRead.observe(float64(st.IOReadBytes)), g.Name, "read"))
		out.Send(prometheus.MustNewConstMetric(descGroupIO, prometheus.CounterValue, acc.ioWrite.observe(float64(st.IOWriteBytes)), g.Name, "write"))
		out.Send(prometheus.MustNewConstMetric(descGroupMem, prometheus.GaugeValue, float64(st.MemoryBytes), g.Name))
		out.Send(prometheus.MustNewConstMetric(descGroupPids, prometheus.GaugeValue, float64(st.Pids), g.Name))
		if st.Limits.CPUQuotaCores > 0 {
			out.Send(prometheus.MustNewConstMetric(descGroupCPULimit, prometheus.GaugeValue, st.Limits.CPUQuotaCores, g.Name))
		}
		if st.Limits.MemoryLimitBytes > 0 {
			out.Send(prometheus.MustNewConstMetric(descGroupMemLimit, prometheus.GaugeValue, float64(st.Limits.MemoryLimitBytes), g.Name))
		}
		if st.Limits.PidsLimit > 0 {
			out.Send(prometheus.MustNewConstMetric(descGroupPidsLimit, prometheus.GaugeValue, float64(st.Limits.PidsLimit), g.Name))
		}
	}
	for name := range c.acc {
		if !keep[name] {
			delete(c.acc, name)
		}
	}
	return errors.Join(errs...)
}
