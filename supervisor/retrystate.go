package supervisor

import (
	"time"

	"github.com/berthd/berth/internal/retry"
	"github.com/cenkalti/backoff/v5"
)

// retryState is when a job whose start failed for a transient reason (a
// held claim, the store, a busy kernel) is tried again: a jittered
// exponential backoff per job, so that many agents that lost the store
// together do not retry together.
type retryState struct {
	b    *backoff.ExponentialBackOff
	next time.Time
}

// failedTransiently schedules job id's next try on policy p's backoff.
// Callers hold a.mu.
func (a *Agent) failedTransiently(id string, p retry.Policy) {
	st, ok := a.retries[id]
	if !ok {
		st = &retryState{b: p.New()}
		a.retries[id] = st
	}
	st.next = a.clock.Now().Add(st.b.NextBackOff())
}

// retryDue reports whether job id may be tried again at now: it has no
// backoff pending, or its next try is due. Callers hold a.mu.
func (a *Agent) retryDue(id string, now time.Time) bool {
	st, ok := a.retries[id]
	return !ok || !now.Before(st.next)
}

// nextRetry returns how long until the earliest pending retry; false when
// none is pending.
func (a *Agent) nextRetry() (time.Duration, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var first time.Time
	for _, st := range a.retries {
		if first.IsZero() || st.next.Before(first) {
			first = st.next
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(0, first.Sub(a.clock.Now())), true
}
