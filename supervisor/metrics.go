package supervisor

import (
	"errors"
	"io/fs"
	"sort"
	"syscall"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

// Every per-job series carries these labels (DESIGN.md, "Metrics and API"):
// never `job`, which Prometheus reserves for the scrape target.
var jobLabels = []string{"job_id", "connector", "kind", "group"}

func jobDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(append([]string{}, jobLabels...), extra...), nil)
}

var (
	descUp          = jobDesc("berth_job_up", "1 when the job's worker process is running, else 0.")
	descState       = jobDesc("berth_job_state", "1 for the job's current state (starting, running, backoff, exited, failed, stopping, stopped).", "state")
	descRestarts    = jobDesc("berth_job_restarts_total", "Times the job's worker was started again after it ended.")
	descCPU         = jobDesc("berth_job_cpu_seconds_total", "CPU time of every process of the job, from cgroup accounting, seconds.", "mode")
	descThrottled   = jobDesc("berth_job_cpu_throttled_seconds_total", "Time the job's processes were held back by the CPU quota (CFS bandwidth), seconds.")
	descThrottledN  = jobDesc("berth_job_cpu_throttled_periods_total", "CFS periods in which the job hit its CPU quota.")
	descCPULimit    = jobDesc("berth_job_cpu_limit_cores", "CPU quota divided by period, cores; absent when unlimited.")
	descMem         = jobDesc("berth_job_memory_bytes", "Memory charged to the job's cgroup (v2 memory.current, v1 memory.usage_in_bytes), bytes.")
	descMemLimit    = jobDesc("berth_job_memory_limit_bytes", "The job's hard memory limit (memory.max, memory.limit_in_bytes), bytes; absent when unlimited.")
	descOOM         = jobDesc("berth_job_oom_kills_total", "Processes of the job killed by the kernel's OOM killer inside its cgroup.")
	descPids        = jobDesc("berth_job_pids", "Tasks in the job's cgroup (pids.current).")
	descProcs       = jobDesc("berth_job_processes", "Processes of the job, from procfs.")
	descRSS         = jobDesc("berth_job_resident_memory_bytes", "Sum of the resident set size of every process of the job, bytes.")
	descThreads     = jobDesc("berth_job_threads", "Sum of the threads of every process of the job.")
	descFDs         = jobDesc("berth_job_open_fds", "Sum of the open file descriptors of every process of the job.")
	descReadBytes   = jobDesc("berth_job_read_bytes_total", "Bytes the job's processes caused to be read from storage (/proc/PID/io read_bytes), including processes that have exited.")
	descWriteBytes  = jobDesc("berth_job_write_bytes_total", "Bytes the job's processes caused to be written to storage (/proc/PID/io write_bytes), including processes that have exited.")
	descCtxSwitches = jobDesc("berth_job_context_switches_total", "Context switches of the job's processes (/proc/PID/status), including processes that have exited.", "type")
	descCollectDur  = prometheus.NewDesc("berth_scrape_collector_duration_seconds", "How long a collector's read took during this scrape, seconds.", []string{"collector"}, nil)
	descCollectOK   = prometheus.NewDesc("berth_scrape_collector_success", "1 when every read of a collector succeeded during this scrape.", []string{"collector"}, nil)
	descJobs        = prometheus.NewDesc("berth_jobs", "Jobs run by this agent, by state.", []string{"state"}, nil)
	descGeneration  = prometheus.NewDesc("berth_assignment_generation", "Generation of the assignment this agent runs.", nil, nil)
	descUnassigned  = prometheus.NewDesc("berth_jobs_unassigned", "Jobs that exist but that no agent runs.", nil, nil)
	allWorkerStates = []worker.State{Waiting, worker.Starting, worker.Running, worker.BackingOff, worker.Exited, worker.Failed, worker.Stopping, worker.Stopped}
)

// collector reads every job's usage at scrape time, as node_exporter's
// collectors do: one source at a time, each timed, each failure reported in
// berth_scrape_collector_success instead of failing the scrape.
type collector struct {
	a    *Agent
	proc procfs.FS
}

// jobView is what a scrape needs of a job, copied under the agent's lock.
type jobView struct {
	labels []string
	group  *cgroup.Group
	status worker.Status
	err    string
}

func (a *Agent) newCollector() (*collector, error) {
	fs, err := procfs.NewFS(procfs.DefaultMountPoint)
	if err != nil {
		return nil, err
	}
	return &collector{a: a, proc: fs}, nil
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descState, descRestarts, descCPU, descThrottled, descThrottledN,
		descCPULimit, descMem, descMemLimit, descOOM, descPids, descProcs, descRSS, descThreads, descFDs,
		descReadBytes, descWriteBytes, descCtxSwitches, descCollectDur, descCollectOK, descJobs, descGeneration, descUnassigned} {
		ch <- d
	}
}

func (a *Agent) views() (map[string]jobView, Desired) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make(map[string]jobView, len(a.jobs))
	for id, j := range a.jobs {
		v := jobView{
			labels: []string{id, j.spec.Connector, string(j.spec.Kind), j.spec.Group},
			group:  j.group,
			err:    j.err,
		}
		if j.holder != "" {
			v.status = worker.Status{State: Waiting, Reason: "claim held by " + j.holder}
		} else if j.w != nil {
			v.status = j.w.Status()
		} else {
			v.status = worker.Status{State: worker.Failed, Reason: j.err}
		}
		out[id] = v
	}
	return out, a.desired
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	views, desired := c.a.views()
	ids := make([]string, 0, len(views))
	for id := range views {
		ids = append(ids, id)
	}
	sort.Strings(ids)

	byState := map[worker.State]int{}
	for _, id := range ids {
		v := views[id]
		byState[v.status.State]++
		up := 0.0
		if v.status.State == worker.Running {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, v.labels...)
		for _, s := range allWorkerStates {
			val := 0.0
			if v.status.State == s {
				val = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, val, append(v.labels, string(s))...)
		}
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(v.status.Restarts), v.labels...)
	}
	for _, s := range allWorkerStates {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(byState[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(descGeneration, prometheus.GaugeValue, float64(desired.Generation))
	ch <- prometheus.MustNewConstMetric(descUnassigned, prometheus.GaugeValue, float64(len(desired.Unassigned)))

	// One scrape at a time updates the accounts, so counters stay monotonic.
	c.a.metrics.mu.Lock()
	defer c.a.metrics.mu.Unlock()
	c.timed(ch, "cgroup", func() bool { return c.collectCgroup(ch, ids, views) })
	c.timed(ch, "procfs", func() bool { return c.collectProcfs(ch, ids, views) })
}

func (c *collector) timed(ch chan<- prometheus.Metric, name string, f func() bool) {
	start := time.Now()
	ok := f()
	ch <- prometheus.MustNewConstMetric(descCollectDur, prometheus.GaugeValue, time.Since(start).Seconds(), name)
	okv := 0.0
	if ok {
		okv = 1
	}
	ch <- prometheus.MustNewConstMetric(descCollectOK, prometheus.GaugeValue, okv, name)
}

func (c *collector) collectCgroup(ch chan<- prometheus.Metric, ids []string, views map[string]jobView) bool {
	ok := true
	for _, id := range ids {
		v := views[id]
		if v.group == nil {
			continue
		}
		st, err := v.group.Stats()
		if err != nil {
			c.a.log.Warn("read cgroup stats", "job_id", id, "error", err)
			ok = false
			continue
		}
		acc := c.a.metrics.account(id)
		l := v.labels
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, acc.cpuUser.observe(st.CPUUserSeconds), append(l, "user")...)
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, acc.cpuSystem.observe(st.CPUSystemSeconds), append(l, "system")...)
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
	return ok
}

// gone reports whether err means the process exited while it was read: not
// an error (CASES C12).
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

func (c *collector) collectProcfs(ch chan<- prometheus.Metric, ids []string, views map[string]jobView) bool {
	ok := true
	for _, id := range ids {
		v := views[id]
		if v.group == nil {
			continue
		}
		pids, err := v.group.Processes()
		if err != nil {
			c.a.log.Warn("list job processes", "job_id", id, "error", err)
			ok = false
			continue
		}
		var rss, threads, fds, procs float64
		seen := make(map[procKey]procReading, len(pids))
		for _, pid := range pids {
			p, err := c.proc.Proc(pid)
			if err != nil {
				continue // exited between listing and reading
			}
			st, err := p.Stat()
			if err != nil {
				if !gone(err) {
					ok = false
				}
				continue
			}
			key := procKey{pid: pid, start: st.Starttime}
			if st.State == "Z" {
				// Exited, not yet reaped: it holds no resources and reads
				// as empty; its counters are carried over until it is.
				seen[key] = procReading{ppid: st.PPID, zombie: true}
				continue
			}
			var t procTotals
			if pio, err := p.IO(); err == nil {
				t.readBytes, t.writeBytes = float64(pio.ReadBytes), float64(pio.WriteBytes)
			} else if !gone(err) {
				ok = false
			}
			if status, err := p.NewStatus(); err == nil {
				t.volCtx, t.involCtx = float64(status.VoluntaryCtxtSwitches), float64(status.NonVoluntaryCtxtSwitches)
			} else if !gone(err) {
				ok = false
			}
			n, err := p.FileDescriptorsLen()
			if err != nil && !gone(err) {
				ok = false
			}
			procs++
			rss += float64(st.ResidentMemory())
			threads += float64(st.NumThreads)
			fds += float64(n)
			seen[key] = procReading{totals: t, ppid: st.PPID}
		}
		total := c.a.metrics.account(id).update(seen)
		l := v.labels
		ch <- prometheus.MustNewConstMetric(descProcs, prometheus.GaugeValue, procs, l...)
		ch <- prometheus.MustNewConstMetric(descRSS, prometheus.GaugeValue, rss, l...)
		ch <- prometheus.MustNewConstMetric(descThreads, prometheus.GaugeValue, threads, l...)
		ch <- prometheus.MustNewConstMetric(descFDs, prometheus.GaugeValue, fds, l...)
		ch <- prometheus.MustNewConstMetric(descReadBytes, prometheus.CounterValue, total.readBytes, l...)
		ch <- prometheus.MustNewConstMetric(descWriteBytes, prometheus.CounterValue, total.writeBytes, l...)
		ch <- prometheus.MustNewConstMetric(descCtxSwitches, prometheus.CounterValue, total.volCtx, append(l, "voluntary")...)
		ch <- prometheus.MustNewConstMetric(descCtxSwitches, prometheus.CounterValue, total.involCtx, append(l, "involuntary")...)
	}
	return ok
}
