package retry

import (
	"testing"
	"time"
)

// A failed key is not due until its backoff passed; Next names the
// earliest; Forget and Keep drop keys.
func TestSchedule(t *testing.T) {
	var s Schedule
	now := time.Unix(1000, 0)
	if _, ok := s.Next(now); ok || !s.Due("a", now) {
		t.Fatal("an empty schedule has something pending")
	}
	p := Policy{Initial: time.Second, Max: 4 * time.Second}
	s.Failed("a", p, now)
	if s.Due("a", now) {
		t.Error("a is due at once after failing")
	}
	d, ok := s.Next(now)
	if !ok || d <= 0 || d > 2*time.Second {
		t.Errorf("next %v %v, want within the first step (1 s with jitter)", d, ok)
	}
	if !s.Due("a", now.Add(10*time.Second)) {
		t.Error("a not due after its backoff")
	}
	s.Failed("b", p, now)
	s.Keep(func(k string) bool { return k == "b" })
	if !s.Due("a", now) || s.Due("b", now) {
		t.Error("Keep dropped the wrong key")
	}
	s.Forget("b")
	if _, ok := s.Next(now); ok {
		t.Error("something pending after Forget")
	}
}
