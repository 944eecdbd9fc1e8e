package supervisor

import (
	"sort"
	"time"

	"sync"

	"github.com/berthd/berth/internal/retry"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/supervisor/plan"
	"github.com/jonboulle/clockwork"
)

// table is the agent's record of its jobs and sharing groups: what the
// executor made, what the view reports. The executor writes it, readers
// read it; mu guards everything.
type table struct {
	clock clockwork.Clock

	mu     sync.RWMutex
	jobs   map[string]*job
	groups map[string]*groupNode
	// desired is the assignment of the last pass; assigned the IDs of its
	// jobs (metrics keep their history).
	desired  source.Desired
	assigned map[string]bool
	// retries is when each job whose start failed transiently (a held
	// claim, the store, a busy kernel) is tried again.
	retries retry.Schedule
	// unreleased are the jobs whose claim this agent's session may still
	// hold though it runs them no more: the release failed (the store
	// did not answer), so that the member the job moved to would wait
	// for it as long as this session lives. Each pass releases them
	// again when releaseRetries says it is due (retryReleases), until
	// the release succeeds, the job starts here again, or a fence ends
	// the session (its claims go with its lease).
	unreleased     map[string]bool
	releaseRetries retry.Schedule
	// handled maps a job to the store revision of the restart request this
	// agent has carried out for it, until the request is gone from the
	// store: a request is carried out once even when its removal fails.
	handled map[string]int64
}

func newTable(clock clockwork.Clock) *table {
	return &table{clock: clock, jobs: map[string]*job{}, groups: map[string]*groupNode{},
		assigned: map[string]bool{}, handled: map[string]int64{}, unreleased: map[string]bool{}}
}

// get returns job id's entry; nil when there is none.
func (t *table) get(id string) *job {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.jobs[id]
}

// remove forgets job id, if j is still its entry (nil: whatever it is),
// and reports whether it did.
func (t *table) remove(id string, j *job) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur := t.jobs[id]; cur != nil && (j == nil || cur == j) {
		delete(t.jobs, id)
		return true
	}
	return false
}

// all returns every job, sorted by ID.
func (t *table) all() []*job {
	t.mu.RLock()
	js := make([]*job, 0, len(t.jobs))
	for _, j := range t.jobs {
		js = append(js, j)
	}
	t.mu.RUnlock()
	sort.Slice(js, func(i, k int) bool { return js[i].spec.ID < js[k].spec.ID })
	return js
}

// current is the table as Decide reads it, at now (for retry backoffs).
func (t *table) current(now time.Time) (map[string]plan.Current, map[string]int64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[string]plan.Current, len(t.jobs))
	for id, j := range t.jobs {
		c := plan.Current{Spec: j.spec, Phase: j.phase, Target: j.target, Permanent: j.permanent, RetryDue: t.retries.Due(id, now)}
		if j.w != nil {
			c.Worker = j.w.Status()
		}
		out[id] = c
	}
	handled := make(map[string]int64, len(t.handled))
	for id, rev := range t.handled {
		handled[id] = rev
	}
	return out, handled
}

// nextRetry returns how long until the earliest pending retry (a start
// or a release of a claim); false when none is pending.
func (t *table) nextRetry() (time.Duration, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	now := t.clock.Now()
	d, ok := t.retries.Next(now)
	if rd, rok := t.releaseRetries.Next(now); rok && (!ok || rd < d) {
		d, ok = rd, true
	}
	return d, ok
}
