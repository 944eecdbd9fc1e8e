package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/berthd/berth/cgroup"
)

// The pressure counters are named as cAdvisor names its own: "waiting" is
// the kernel's "some" line (at least one task stalled), "stalled" its
// "full" line (every non-idle task stalled at once); source
// Documentation/accounting/psi.rst.
var (
	famCPUWaiting = jobCounter("berth_job_pressure_cpu_waiting_seconds_total", "Time at least one task of the job waited for a CPU (cpu.pressure some total, Documentation/accounting/psi.rst), seconds.")
	famCPUStalled = jobCounter("berth_job_pressure_cpu_stalled_seconds_total", "Time every non-idle task of the job waited for a CPU at once (cpu.pressure full total), seconds.")
	famMemWaiting = jobCounter("berth_job_pressure_memory_waiting_seconds_total", "Time at least one task of the job stalled on memory (memory.pressure some total), seconds.")
	famMemStalled = jobCounter("berth_job_pressure_memory_stalled_seconds_total", "Time every non-idle task of the job stalled on memory at once (memory.pressure full total), seconds.")
	famIOWaiting  = jobCounter("berth_job_pressure_io_waiting_seconds_total", "Time at least one task of the job waited for block I/O (io.pressure some total), seconds.")
	famIOStalled  = jobCounter("berth_job_pressure_io_stalled_seconds_total", "Time every non-idle task of the job waited for block I/O at once (io.pressure full total), seconds.")
)

// pressureCollector reads each job's pressure stall information from its
// cgroup2 directory (pure v2, or the unified tracking tree of a hybrid
// host). On a kernel without PSI the series are absent and one log line
// says why.
type pressureCollector struct {
	log    *slog.Logger
	acc    accounts[pressureAccount]
	logged sync.Once
}

func newPressure(log *slog.Logger) *pressureCollector { return &pressureCollector{log: log} }

// Update implements Collector. Jobs are read in parallel across the
// cores.
func (c *pressureCollector) Update(out Output, s Snapshot) error {
	return c.acc.eachJob(s, func(i int, j *Job, acc *pressureAccount) error {
		p, err := j.Cgroup.Pressure()
		switch {
		case errors.Is(err, cgroup.ErrNoPressure):
			c.logged.Do(func() { c.log.Warn("no per-job pressure metrics", "job_id", j.ID, "reason", err) })
			return nil
		case errors.Is(err, cgroup.ErrNotExist):
			return nil // stopped meanwhile
		case err != nil:
			return fmt.Errorf("job %s: %w", j.ID, err)
		}
		for k, r := range [...]struct {
			st               cgroup.StallTime
			waiting, stalled *jobFamily
		}{{p.CPU, famCPUWaiting, famCPUStalled}, {p.Memory, famMemWaiting, famMemStalled}, {p.IO, famIOWaiting, famIOStalled}} {
			out.job(r.waiting, i, acc[2*k].observe(r.st.SomeSeconds))
			if r.st.HasFull {
				out.job(r.stalled, i, acc[2*k+1].observe(r.st.FullSeconds))
			}
		}
		return nil
	})
}
