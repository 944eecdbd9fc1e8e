package testutil

import (
	"testing"
	"time"
)

// BERTH_TEST_SLACK sets the factor; unset, it is 3; below 1 or not a
// number, it is refused.
func TestSlackFromEnvironment(t *testing.T) {
	t.Setenv("BERTH_TEST_SLACK", "")
	if got := slack(); got != 3 {
		t.Errorf("unset: Slack %g, want 3", got)
	}
	t.Setenv("BERTH_TEST_SLACK", "1.5")
	if got := slack(); got != 1.5 {
		t.Errorf("1.5: Slack %g", got)
	}
	for _, bad := range []string{"0.5", "x", "-2"} {
		t.Setenv("BERTH_TEST_SLACK", bad)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("BERTH_TEST_SLACK=%q accepted", bad)
				}
			}()
			slack()
		}()
	}
	if got, want := Deadline(2*time.Second), time.Duration(float64(2*time.Second)*Slack); got != want {
		t.Errorf("Deadline(2s) = %v, want %v", got, want)
	}
}

// Poll gives up only after the stretched deadline: a condition that holds
// from 1.2 × timeout on is seen (Slack is at least 1.5 here).
func TestPollWaitsTheStretchedDeadline(t *testing.T) {
	if Slack < 1.5 {
		t.Skipf("BERTH_TEST_SLACK=%g: below 1.5", Slack)
	}
	timeout := 100 * time.Millisecond
	from := time.Now().Add(timeout * 12 / 10)
	if !Poll(timeout, func() bool { return time.Now().After(from) }) {
		t.Errorf("Poll(%v) gave up before %v", timeout, Deadline(timeout))
	}
}
