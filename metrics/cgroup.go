package metrics

import (
	"fmt"
	"log/slog"
)

var (
	famCPU        = newJobFamily("berth_job_cpu_seconds_total", "CPU time of every process of the job, from cgroup accounting, seconds.", "counter", "mode", "user", "system")
	famThrottled  = jobCounter("berth_job_cpu_throttled_seconds_total", "Time the job's processes were held back by the CPU quota (CFS bandwidth), seconds.")
	famThrottledN = jobCounter("berth_job_cpu_throttled_periods_total", "CFS periods in which the job hit its CPU quota.")
	famCPULimit   = jobGauge("berth_job_cpu_limit_cores", "CPU quota divided by period, cores; absent when unlimited.")
	famMem        = jobGauge("berth_job_memory_bytes", "Memory charged to the job's cgroup (v2 memory.current, v1 memory.usage_in_bytes), bytes.")
	famMemLimit   = jobGauge("berth_job_memory_limit_bytes", "The job's hard memory limit (memory.max, memory.limit_in_bytes), bytes; absent when unlimited.")
	famOOM        = jobCounter("berth_job_oom_kills_total", "Processes of the job killed by the kernel's OOM killer inside its cgroup.")
	famPids       = jobGauge("berth_job_pids", "Tasks in the job's cgroup (pids.current).")
)

// cgroupCollector reads each job's cgroup accounting: CPU time and
// throttling, memory, OOM kills, pids.
type cgroupCollector struct {
	log *slog.Logger
	acc accounts[cgroupAccount]
}

func newCgroup(log *slog.Logger) *cgroupCollector { return &cgroupCollector{log: log} }

// Update implements Collector. A job whose cgroup cannot be read is left
// out of this scrape and fails the collector; the others are reported.
// Only what changes is read (cgroup.Group.Usage: a handful of files per
// job, with the limits berth applied). Jobs are read in parallel across
// the cores.
func (c *cgroupCollector) Update(out Output, s Snapshot) error {
	return c.acc.eachJob(s, func(i int, j *Job, acc *cgroupAccount) error {
		u, err := j.Cgroup.Usage()
		if err != nil {
			return fmt.Errorf("job %s: %w", j.ID, err)
		}
		lim := u.Limits
		out.jobWith(famCPU, i, "user", acc.cpuUser.observe(u.CPUUserSeconds))
		out.jobWith(famCPU, i, "system", acc.cpuSystem.observe(u.CPUSystemSeconds))
		out.job(famThrottled, i, acc.throttledSeconds.observe(u.ThrottledSeconds))
		out.job(famThrottledN, i, acc.throttledPeriods.observe(float64(u.ThrottledPeriods)))
		out.job(famOOM, i, acc.oomKills.observe(float64(u.OOMKills)))
		out.job(famMem, i, float64(u.MemoryBytes))
		if lim.MemoryLimitBytes > 0 {
			out.job(famMemLimit, i, float64(lim.MemoryLimitBytes))
		}
		if lim.CPUQuotaCores > 0 {
			out.job(famCPULimit, i, lim.CPUQuotaCores)
		}
		out.job(famPids, i, float64(u.Pids))
		return nil
	})
}
