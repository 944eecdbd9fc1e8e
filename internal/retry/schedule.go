package retry

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Schedule is when each of many keys (jobs) is tried again after a
// transient failure: a jittered exponential backoff per key, so that many
// agents that failed together do not retry together. It is not safe for
// concurrent use: its owner guards it.
type Schedule struct {
	next map[string]*pending
}

// pending is one key's backoff and its next try.
type pending struct {
	b    *backoff.ExponentialBackOff
	next time.Time
}

// Failed schedules key's next try at now plus the next step of policy p's
// backoff (the policy of the key's first failure is kept until Forget).
func (s *Schedule) Failed(key string, p Policy, now time.Time) {
	if s.next == nil {
		s.next = map[string]*pending{}
	}
	st, ok := s.next[key]
	if !ok {
		st = &pending{b: p.New()}
		s.next[key] = st
	}
	st.next = now.Add(st.b.NextBackOff())
}

// Due reports whether key may be tried at now: nothing is pending for it,
// or its next try is due.
func (s *Schedule) Due(key string, now time.Time) bool {
	st, ok := s.next[key]
	return !ok || !now.Before(st.next)
}

// Forget drops key's backoff: its next failure starts from the policy's
// first step.
func (s *Schedule) Forget(key string) { delete(s.next, key) }

// Keep forgets every key for which keep is false.
func (s *Schedule) Keep(keep func(key string) bool) {
	for k := range s.next {
		if !keep(k) {
			delete(s.next, k)
		}
	}
}

// Next returns how long after now the earliest pending try is due (0 when
// overdue); false when none is pending.
func (s *Schedule) Next(now time.Time) (time.Duration, bool) {
	var first time.Time
	for _, st := range s.next {
		if first.IsZero() || st.next.Before(first) {
			first = st.next
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(0, first.Sub(now)), true
}
