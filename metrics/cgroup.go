package metrics

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descCPU        = jobDesc("berth_job_cpu_seconds_total", "CPU time of every process of the job, from cgroup accounting, seconds.", "mode")
	descThrottled  = jobDesc("berth_job_cpu_throttled_seconds_total", "Time the job's processes were held back by the CPU quota (CFS bandwidth), seconds.")
	descThrottledN = jobDesc("berth_job_cpu_throttled_periods_total", "CFS periods in which the job hit its CPU quota.")
	descCPULimit   = jobDesc("berth_job_cpu_limit_cores", "CPU quota divided by period, cores; absent when unlimited.")
	descMem        = jobDesc("berth_job_memory_bytes", "Memory charged to the job's cgroup (v2 memory.current, v1 memory.usage_in_bytes), bytes.")
	descMemLimit   = jobDesc("berth_job_memory_limit_bytes", "The job's hard memory limit (memory.max, memory.limit_in_bytes), bytes; absent when unlimited.")
	descOOM        = jobDesc("berth_job_oom_kills_total", "Processes of the job killed by the kernel's OOM killer inside its cgroup.")
	descPids       = jobDesc("berth_job_pids", "Tasks in the job's cgroup (pids.current).")
)

// cgroupCollector reads each job's cgroup accounting: CPU time and
// throttling, memory, OOM kills, pids.
type cgroupCollector struct {
	log *slog.Logger
	acc accounts
}

func newCgroup(log *slog.Logger) *cgroupCollector { return &cgroupCollector{log: log} }

// Update implements Collector. A job whose cgroup cannot be read is left
// out of this scrape and fails the collector; the others are reported.
func (c *cgroupCollector) Update(ch chan<- prometheus.Metric, s Snapshot) error {
	c.acc.mu.Lock()
	defer c.acc.mu.Unlock()
	c.acc.retain(s.Assigned)
	var errs []error
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.Cgroup == nil {
			continue
		}
		st, err := j.Cgroup.Stats()
		if err != nil {
			errs = append(errs, fmt.Errorf("job %s: %w", j.ID, err))
			continue
		}
		acc := c.acc.get(j.ID)
		l := j.labels()
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, acc.cpuUser.observe(st.CPUUserSeconds), with(l, "user")...)
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, acc.cpuSystem.observe(st.CPUSystemSeconds), with(l, "system")...)
		ch <- prometheus.MustNewConstMetric(descThrottled, prometheus.CounterValue, acc.throttledSeconds.observe(st.ThrottledSeconds), l...)
		ch <- prometheus.MustNewConstMetric(descThrottledN, prometheus.CounterValue, acc.throttledPeriods.observe(float64(st.ThrottledPeriods)), l...)
		ch <- prometheus.MustNewConstMetric(descOOM, prometheus.CounterValue, acc.oomKills.observe(float64(st.OOMKills)), l...)
		ch <- prometheus.MustNewConstMetric(descMem, prometheus.GaugeValue, float64(st.MemoryBytes), l...)
		if st.MemoryLimitBytes > 0 {
			ch <- prometheus.MustNewConstMetric(descMemLimit, prometheus.GaugeValue, float64(st.MemoryLimitBytes), l...)
		}
		if st.CPUQuotaCores > 0 {
			ch <- prometheus.MustNewConstMetric(descCPULimit, prometheus.GaugeValue, st.CPUQuotaCores, l...)
		}
		ch <- prometheus.MustNewConstMetric(descPids, prometheus.GaugeValue, float64(st.Pids), l...)
	}
	return errors.Join(errs...)
}
