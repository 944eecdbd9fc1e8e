package recommend

import (
	"slices"
	"sync"
	"time"

	"github.com/berthd/berth/limits"
)

// Model holds the usage history of every job of one agent. It is fed
// from one place (the agent's sampler, one goroutine on one ticker for
// every job: no goroutine or timer per job) and read by the API; its
// methods are safe for concurrent use.
type Model struct {
	p    Params
	mu   sync.Mutex
	jobs map[string]*history
}

// New returns an empty model.
//
// Errors: a parameter is out of its bounds (Params.check says which).
func New(p Params) (*Model, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return &Model{p: p, jobs: make(map[string]*history)}, nil
}

// Params returns the model's parameters.
func (m *Model) Params() Params { return m.p }

// job returns job's history, made on first use; m.mu is held.
func (m *Model) job(job string) *history {
	h := m.jobs[job]
	if h == nil {
		h = &history{}
		m.jobs[job] = h
	}
	return h
}

// ObserveCPU takes a CPU sample of job. Samples of one job must come in
// time order; one not later than the job's previous CPU sample is ignored.
func (m *Model) ObserveCPU(job string, s CPUSample) {
	m.mu.Lock()
	m.job(job).observeCPU(&m.p, s)
	m.mu.Unlock()
}

// ObserveMemory takes a memory sample of job, in time order as
// ObserveCPU's.
func (m *Model) ObserveMemory(job string, s MemorySample) {
	m.mu.Lock()
	m.job(job).observeMemory(&m.p, s)
	m.mu.Unlock()
}

// Forget drops job's history (its definition was deleted).
func (m *Model) Forget(job string) {
	m.mu.Lock()
	delete(m.jobs, job)
	m.mu.Unlock()
}

// Expire drops the history of every job with no sample for a whole
// window (Intervals × Params.Interval, 8 days by default) before now: a
// job that has left this host. It returns the jobs dropped, sorted.
func (m *Model) Expire(now time.Time) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var gone []string
	cut := now.Add(-m.p.window()).UnixNano()
	for id, h := range m.jobs {
		if h.last() < cut {
			delete(m.jobs, id)
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	return gone
}

// Jobs returns the jobs with a history, sorted.
func (m *Model) Jobs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.jobs))
	for id := range m.jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Recommend returns job's recommendation at now, for the limits in force
// cur (their cpu_period sets the quota's resolution) on host; false when
// the job has no history.
func (m *Model) Recommend(job string, now time.Time, cur limits.Limits, host Host) (Recommendation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.jobs[job]
	if h == nil {
		return Recommendation{}, false
	}
	r := h.recommend(&m.p, now, cur, host)
	r.Job = job
	return r, true
}

// Bytes is the memory job's history holds in the agent (0 without one):
// its fixed fields and its histograms' buckets, not the map entry and
// the job's ID.
func (m *Model) Bytes(job string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.jobs[job]; h != nil {
		return h.bytes()
	}
	return 0
}
