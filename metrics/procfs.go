package metrics

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

var (
	descProcs       = jobDesc("berth_job_processes", "Processes of the job, from procfs.")
	descRSS         = jobDesc("berth_job_resident_memory_bytes", "Sum of the resident set size of every process of the job, bytes.")
	descThreads     = jobDesc("berth_job_threads", "Sum of the threads of every process of the job.")
	descFDs         = jobDesc("berth_job_open_fds", "Sum of the open file descriptors of every process of the job.")
	descReadBytes   = jobDesc("berth_job_read_bytes_total", "Bytes the job's processes caused to be read from storage (/proc/PID/io read_bytes), including processes that have exited.")
	descWriteBytes  = jobDesc("berth_job_write_bytes_total", "Bytes the job's processes caused to be written to storage (/proc/PID/io write_bytes), including processes that have exited.")
	descCtxSwitches = jobDesc("berth_job_context_switches_total", "Context switches of the job's processes (/proc/PID/status), including processes that have exited.", "type")
)

// procfsCollector sums every process of each job from procfs: processes,
// threads, RSS, open fds, storage I/O and context switches.
type procfsCollector struct {
	log  *slog.Logger
	proc procfs.FS
	acc  accounts
}

func newProcfs(log *slog.Logger) (*procfsCollector, error) {
	fs, err := procfs.NewFS(procfs.DefaultMountPoint)
	if err != nil {
		return nil, fmt.Errorf("open procfs at %s: %w", procfs.DefaultMountPoint, err)
	}
	return &procfsCollector{log: log, proc: fs}, nil
}

// gone reports whether err means the process exited while it was read: not
// an error (failure case C12).
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// Update implements Collector.
func (c *procfsCollector) Update(ch chan<- prometheus.Metric, s Snapshot) error {
	c.acc.mu.Lock()
	defer c.acc.mu.Unlock()
	c.acc.retain(s.Assigned)
	var errs []error
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.Cgroup == nil {
			continue
		}
		pids, err := j.Cgroup.Processes()
		if err != nil {
			errs = append(errs, fmt.Errorf("list processes of job %s: %w", j.ID, err))
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
					errs = append(errs, fmt.Errorf("job %s pid %d: %w", j.ID, pid, err))
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
				errs = append(errs, fmt.Errorf("job %s pid %d: %w", j.ID, pid, err))
			}
			if status, err := p.NewStatus(); err == nil {
				t.volCtx, t.involCtx = float64(status.VoluntaryCtxtSwitches), float64(status.NonVoluntaryCtxtSwitches)
			} else if !gone(err) {
				errs = append(errs, fmt.Errorf("job %s pid %d: %w", j.ID, pid, err))
			}
			n, err := p.FileDescriptorsLen()
			if err != nil && !gone(err) {
				errs = append(errs, fmt.Errorf("job %s pid %d: %w", j.ID, pid, err))
			}
			procs++
			rss += float64(st.ResidentMemory())
			threads += float64(st.NumThreads)
			fds += float64(n)
			seen[key] = procReading{totals: t, ppid: st.PPID}
		}
		total := c.acc.get(j.ID).update(seen)
		l := j.labels()
		ch <- prometheus.MustNewConstMetric(descProcs, prometheus.GaugeValue, procs, l...)
		ch <- prometheus.MustNewConstMetric(descRSS, prometheus.GaugeValue, rss, l...)
		ch <- prometheus.MustNewConstMetric(descThreads, prometheus.GaugeValue, threads, l...)
		ch <- prometheus.MustNewConstMetric(descFDs, prometheus.GaugeValue, fds, l...)
		ch <- prometheus.MustNewConstMetric(descReadBytes, prometheus.CounterValue, total.readBytes, l...)
		ch <- prometheus.MustNewConstMetric(descWriteBytes, prometheus.CounterValue, total.writeBytes, l...)
		ch <- prometheus.MustNewConstMetric(descCtxSwitches, prometheus.CounterValue, total.volCtx, with(l, "voluntary")...)
		ch <- prometheus.MustNewConstMetric(descCtxSwitches, prometheus.CounterValue, total.involCtx, with(l, "involuntary")...)
	}
	return errors.Join(errs...)
}
