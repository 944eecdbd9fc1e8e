package metrics

import (
	"cmp"
	"errors"
	"slices"
	"sync"
)

// counter turns a value that may reset (a cgroup recreated for a job, a
// process that exited) into a Prometheus counter that never goes down: when
// a new reading is below the last one, the last one is added to a base.
type counter struct {
	base, last float64
}

func (c *counter) observe(v float64) float64 {
	if v < c.last {
		c.base += c.last
	}
	c.last = v
	return c.base + v
}

// procKey identifies one process for its whole life: a PID may be reused,
// a (PID, start time) pair is not.
type procKey struct {
	pid   int
	start uint64 // clock ticks after boot, /proc/PID/stat field 22
}

func (k procKey) compare(o procKey) int {
	if c := cmp.Compare(k.pid, o.pid); c != 0 {
		return c
	}
	return cmp.Compare(k.start, o.start)
}

// procEntry is one process's reading in a procSet.
type procEntry struct {
	key procKey
	r   procReading
}

// procSet is the readings of one job's processes in one scrape, sorted by
// key once complete (sort). A slice, not a map: most jobs have one process
// or a few, and a map costs a group of 8 slots, about 0.6 KiB, per job and
// per set kept (two per job).
type procSet []procEntry

func (s procSet) sort() { slices.SortFunc(s, func(a, b procEntry) int { return a.key.compare(b.key) }) }

// find is the index of k in the sorted s, -1 when it is not there.
func (s procSet) find(k procKey) int {
	i, ok := slices.BinarySearchFunc(s, k, func(e procEntry, k procKey) int { return e.key.compare(k) })
	if !ok {
		return -1
	}
	return i
}

// hasPID says whether the sorted s holds a process with this pid.
func (s procSet) hasPID(pid int) bool {
	i, _ := slices.BinarySearchFunc(s, pid, func(e procEntry, pid int) int { return cmp.Compare(e.key.pid, pid) })
	return i < len(s) && s[i].key.pid == pid
}

// procTotals are one process's cumulative counters as last read.
type procTotals struct {
	readBytes, writeBytes float64
	volCtx, involCtx      float64
}

func (t *procTotals) add(o procTotals) {
	t.readBytes += o.readBytes
	t.writeBytes += o.writeBytes
	t.volCtx += o.volCtx
	t.involCtx += o.involCtx
}

// procReading is what a scan read of one process of the job.
type procReading struct {
	totals procTotals
	ppid   int
	zombie bool // exited, not yet reaped: its counters are carried over
}

// procAccount is the procfs collector's history of one job's processes,
// which keeps its counters monotonic and free of double counting when
// processes exit (failure case C12; node_exporter#1042):
//
//   - /proc/PID/io of a process includes the I/O of every child it has
//     reaped (kernel/exit.c, wait_task_zombie adds the child's ioac to the
//     parent's signal). So an exited process whose parent is still in the
//     job is already counted by that parent; one whose parent is outside
//     the job (the agent, which reaps the main process and every orphan) is
//     not, and its last reading is kept in `gone`.
//   - voluntary/involuntary context switches (/proc/PID/status) are not
//     passed to the parent, so every exited process's last reading is kept.
//
// Each collector keeps only its own kind of account per job (procAccount,
// cgroupAccount, pressureAccount): one struct with every collector's
// fields, kept by each of the three, cost about 0.5 KiB per job more.
type procAccount struct {
	live procSet // sorted
	// spare is the set of the scrape before, kept for reuse (scratch).
	spare procSet
	gone  procTotals
}

// cgroupAccount is the cgroup collector's history of one job: its
// counters survive a cgroup being made anew for the job.
type cgroupAccount struct {
	cpuUser, cpuSystem, throttledPeriods, throttledSeconds, oomKills counter
}

// pressureAccount is the pressure collector's history of one job: cpu
// some, cpu full, memory some, memory full, io some, io full.
type pressureAccount [6]counter

// scratch returns an empty set for the next scrape's readings of this job:
// the set of the scrape before the last, reused (update keeps the last).
func (a *procAccount) scratch() procSet {
	s := a.spare[:0]
	a.spare = nil
	return s
}

// update replaces the live set with seen (sorting it) and returns the
// job's totals.
func (a *procAccount) update(seen procSet) procTotals {
	seen.sort()
	for _, e := range a.live {
		if seen.find(e.key) >= 0 {
			continue
		}
		last := e.r
		a.gone.volCtx += last.totals.volCtx
		a.gone.involCtx += last.totals.involCtx
		if !seen.hasPID(last.ppid) {
			a.gone.readBytes += last.totals.readBytes
			a.gone.writeBytes += last.totals.writeBytes
		}
	}
	total := a.gone
	for i := range seen {
		// A zombie reads as empty: keep its last reading until it is
		// reaped. A process's own counters only grow; guard anyway against
		// a reading below the last one (a racing exit read as zeros).
		if j := a.live.find(seen[i].key); j >= 0 {
			seen[i].r.totals = maxTotals(seen[i].r.totals, a.live[j].r.totals)
		}
		total.add(seen[i].r.totals)
	}
	a.live, a.spare = seen, a.live
	return total
}

func maxTotals(a, b procTotals) procTotals {
	return procTotals{
		readBytes:  max(a.readBytes, b.readBytes),
		writeBytes: max(a.writeBytes, b.writeBytes),
		volCtx:     max(a.volCtx, b.volCtx),
		involCtx:   max(a.involCtx, b.involCtx),
	}
}

// accounts holds every job's history between scrapes, for one collector
// (T is its kind of account): one scrape at a time updates it, so its
// counters stay monotonic.
type accounts[T any] struct {
	mu   sync.Mutex
	jobs map[string]*T
}

// get returns the account of job id, made on first use. Callers hold mu.
func (a *accounts[T]) get(id string) *T {
	if a.jobs == nil {
		a.jobs = map[string]*T{}
	}
	j, ok := a.jobs[id]
	if !ok {
		j = new(T)
		a.jobs[id] = j
	}
	return j
}

// forJobs returns the account of each job with a cgroup, in the order of
// jobs (nil for a job without one), made on first use: the parallel reads
// of a scrape then each touch only their own job's account. Callers hold
// mu.
func (a *accounts[T]) forJobs(jobs []Job) []*T {
	out := make([]*T, len(jobs))
	for i := range jobs {
		if jobs[i].Cgroup != nil {
			out[i] = a.get(jobs[i].ID)
		}
	}
	return out
}

// retain drops the history of every job not in keep: a job that is no
// longer assigned here. A job restarted with a new definition stays
// assigned, so it keeps its history and its counters do not go down.
// Callers hold mu.
func (a *accounts[T]) retain(keep map[string]bool) {
	for id := range a.jobs {
		if !keep[id] {
			delete(a.jobs, id)
		}
	}
}

// eachJob runs read on every job of s that has a cgroup, with the job's
// index in s and its account, in parallel across the cores (parallel),
// under mu and after the accounts of jobs no longer assigned are dropped
// (retain): the frame of one per-job collector's Update. It returns the
// errors read returned, joined.
func (a *accounts[T]) eachJob(s Snapshot, read func(i int, j *Job, acc *T) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.retain(s.Assigned)
	accs := a.forJobs(s.Jobs)
	errs := make([]error, len(s.Jobs))
	parallel(len(s.Jobs), func(i int) {
		j := &s.Jobs[i]
		if j.Cgroup == nil {
			return
		}
		errs[i] = read(i, j, accs[i])
	})
	return errors.Join(errs...)
}
