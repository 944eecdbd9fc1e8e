package metrics

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"syscall"

	"github.com/prometheus/procfs"
)

var (
	famProcs       = jobGauge("berth_job_processes", "Processes of the job, from procfs.")
	famRSS         = jobGauge("berth_job_resident_memory_bytes", "Sum of the resident set size of every process of the job, bytes.")
	famThreads     = jobGauge("berth_job_threads", "Sum of the threads of every process of the job.")
	famFDs         = jobGauge("berth_job_open_fds", "Sum of the open file descriptors of every process of the job.")
	famReadBytes   = jobCounter("berth_job_read_bytes_total", "Bytes the job's processes caused to be read from storage (/proc/PID/io read_bytes), including processes that have exited.")
	famWriteBytes  = jobCounter("berth_job_write_bytes_total", "Bytes the job's processes caused to be written to storage (/proc/PID/io write_bytes), including processes that have exited.")
	famCtxSwitches = newJobFamily("berth_job_context_switches_total", "Context switches of the job's processes (/proc/PID/status), including processes that have exited.", "counter", "type", "voluntary", "involuntary")
)

// procfsCollector sums every process of each job from procfs: processes,
// threads, RSS, open fds, storage I/O and context switches.
type procfsCollector struct {
	log *slog.Logger
	acc accounts[procAccount]
}

func newProcfs(log *slog.Logger) (*procfsCollector, error) {
	if _, err := procfs.NewFS(procfs.DefaultMountPoint); err != nil {
		return nil, fmt.Errorf("open procfs at %s: %w", procfs.DefaultMountPoint, err)
	}
	return &procfsCollector{log: log}, nil
}

// gone reports whether err means the process exited while it was read: not
// an error (failure case C12).
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// Update implements Collector. A job's processes are those of its latest
// run's cgroup (cgroup.Group.Processes: one cgroup.procs read); each is
// read from /proc/PID/stat, io and status and its fds counted. Jobs are
// read in parallel across the cores.
func (c *procfsCollector) Update(out Output, s Snapshot) error {
	return c.acc.eachJob(s, func(i int, j *Job, acc *procAccount) error {
		return c.job(out, i, j, acc)
	})
}

// job reads and sends one job's processes.
func (c *procfsCollector) job(out Output, i int, j *Job, acc *procAccount) error {
	pids, err := j.Cgroup.Processes()
	if err != nil {
		return fmt.Errorf("list processes of job %s: %w", j.ID, err)
	}
	bp := procBufs.Get().(*[]byte)
	defer procBufs.Put(bp)
	buf := *bp
	var errs []error
	var rss, threads, fds, procs float64
	seen := acc.scratch()
	for _, pid := range pids {
		st, err := readStat(pid, buf)
		if err != nil {
			if !gone(err) {
				errs = append(errs, fmt.Errorf("job %s pid %d: %w", j.ID, pid, err))
			}
			continue // exited between listing and reading
		}
		key := procKey{pid: pid, start: st.StartTicks}
		if st.State == 'Z' {
			// Exited, not yet reaped: it holds no resources and reads
			// as empty; its counters are carried over until it is.
			seen = append(seen, procEntry{key, procReading{ppid: st.PPID, zombie: true}})
			continue
		}
		var t procTotals
		if r, w, err := readIO(pid, buf); err == nil {
			t.readBytes, t.writeBytes = float64(r), float64(w)
		} else if !gone(err) {
			errs = append(errs, fmt.Errorf("job %s pid %d: %w", j.ID, pid, err))
		}
		if v, iv, err := readCtxSwitches(pid, buf); err == nil {
			t.volCtx, t.involCtx = float64(v), float64(iv)
		} else if !gone(err) {
			errs = append(errs, fmt.Errorf("job %s pid %d: %w", j.ID, pid, err))
		}
		n, err := countFDs(pid)
		if err != nil && !gone(err) {
			errs = append(errs, fmt.Errorf("job %s pid %d: %w", j.ID, pid, err))
		}
		procs++
		rss += float64(st.RSSPages * pageSize)
		threads += float64(st.Threads)
		fds += float64(n)
		seen = append(seen, procEntry{key, procReading{totals: t, ppid: st.PPID}})
	}
	total := acc.update(seen)
	out.job(famProcs, i, procs)
	out.job(famRSS, i, rss)
	out.job(famThreads, i, threads)
	out.job(famFDs, i, fds)
	out.job(famReadBytes, i, total.readBytes)
	out.job(famWriteBytes, i, total.writeBytes)
	out.jobWith(famCtxSwitches, i, "voluntary", total.volCtx)
	out.jobWith(famCtxSwitches, i, "involuntary", total.involCtx)
	return errors.Join(errs...)
}
