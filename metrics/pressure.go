package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/berthd/berth/cgroup"
	"github.com/prometheus/client_golang/prometheus"
)

// The pressure counters are named as cAdvisor names its own: "waiting" is
// the kernel's "some" line (at least one task stalled), "stalled" its
// "full" line (every non-idle task stalled at once); source
// Documentation/accounting/psi.rst.
var (
	descCPUWaiting = jobDesc("berth_job_pressure_cpu_waiting_seconds_total", "Time at least one task of the job waited for a CPU (cpu.pressure some total, Documentation/accounting/psi.rst), seconds.")
	descCPUStalled = jobDesc("berth_job_pressure_cpu_stalled_seconds_total", "Time every non-idle task of the job waited for a CPU at once (cpu.pressure full total), seconds.")
	descMemWaiting = jobDesc("berth_job_pressure_memory_waiting_seconds_total", "Time at least one task of the job stalled on memory (memory.pressure some total), seconds.")
	descMemStalled = jobDesc("berth_job_pressure_memory_stalled_seconds_total", "Time every non-idle task of the job stalled on memory at once (memory.pressure full total), seconds.")
	descIOWaiting  = jobDesc("berth_job_pressure_io_waiting_seconds_total", "Time at least one task of the job waited for block I/O (io.pressure some total), seconds.")
	descIOStalled  = jobDesc("berth_job_pressure_io_stalled_seconds_total", "Time every non-idle task of the job waited for block I/O at once (io.pressure full total), seconds.")
)

// pressureCollector reads each job's pressure stall information from its
// cgroup2 directory (pure v2, or the unified tracking tree of a hybrid
// host). On a kernel without PSI the series are absent and one log line
// says why.
type pressureCollector struct {
	log    *slog.Logger
	acc    accounts
	logged sync.Once
}

func newPressure(log *slog.Logger) *pressureCollector { return &pressureCollector{log: log} }

// Update implements Collector.
func (c *pressureCollector) Update(ch chan<- prometheus.Metric, s Snapshot) error {
	c.acc.mu.Lock()
	defer c.acc.mu.Unlock()
	c.acc.retain(s.Assigned)
	var errs []error
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.Cgroup == nil {
			continue
		}
		p, err := j.Cgroup.Pressure()
		switch {
		case errors.Is(err, cgroup.ErrNoPressure):
			c.logged.Do(func() { c.log.Warn("no per-job pressure metrics", "job_id", j.ID, "reason", err) })
			continue
		case errors.Is(err, cgroup.ErrNotExist):
			continue // stopped meanwhile
		case err != nil:
			errs = append(errs, fmt.Errorf("job %s: %w", j.ID, err))
			continue
		}
		acc, l := c.acc.get(j.ID), j.labels()
		for k, r := range []struct {
			st               cgroup.StallTime
			waiting, stalled *prometheus.Desc
		}{{p.CPU, descCPUWaiting, descCPUStalled}, {p.Memory, descMemWaiting, descMemStalled}, {p.IO, descIOWaiting, descIOStalled}} {
			ch <- prometheus.MustNewConstMetric(r.waiting, prometheus.CounterValue, acc.pressure[2*k].observe(r.st.SomeSeconds), l...)
			if r.st.HasFull {
				ch <- prometheus.MustNewConstMetric(r.stalled, prometheus.CounterValue, acc.pressure[2*k+1].observe(r.st.FullSeconds), l...)
			}
		}
	}
	return errors.Join(errs...)
}
