package supervisor

import (
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

// jobAccount is the usage history of one job that keeps its counters
// monotonic: processes that have exited contribute their last reading to
// `gone`, so a sum over a job's processes never decreases when one exits
// (CASES C12; node_exporter#1042).
type jobAccount struct {
	live map[procKey]procTotals
	gone procTotals
	// cgroup counters survive a cgroup being made anew for the job.
	cpuUser, cpuSystem, throttledPeriods, throttledSeconds, oomKills counter
}

func newJobAccount() *jobAccount { return &jobAccount{live: map[procKey]procTotals{}} }

// update replaces the live set with seen and returns the job's totals.
func (a *jobAccount) update(seen map[procKey]procTotals) procTotals {
	for k, last := range a.live {
		if _, ok := seen[k]; !ok {
			a.gone.add(last)
		}
	}
	total := a.gone
	for k, t := range seen {
		// A process's own counters only grow; guard anyway against a
		// reading below the last one (a racing exit read as zeros).
		if last, ok := a.live[k]; ok {
			t = maxTotals(t, last)
			seen[k] = t
		}
		total.add(t)
	}
	a.live = seen
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

// metricsState holds every job's account between scrapes.
type metricsState struct {
	mu       sync.Mutex // one scrape at a time updates accounts
	accounts map[string]*jobAccount
}

func newMetricsState() *metricsState {
	return &metricsState{accounts: map[string]*jobAccount{}}
}

func (m *metricsState) account(id string) *jobAccount {
	a, ok := m.accounts[id]
	if !ok {
		a = newJobAccount()
		m.accounts[id] = a
	}
	return a
}

// retain drops the history of every job not in keep: a job that is no
// longer assigned here. A job restarted with a new definition keeps its
// history, so its counters do not go down.
func (m *metricsState) retain(keep map[string]bool) {
	m.mu.Lock()
	for id := range m.accounts {
		if !keep[id] {
			delete(m.accounts, id)
		}
	}
	m.mu.Unlock()
}
