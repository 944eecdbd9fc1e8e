package main

import (
	"testing"

	"github.com/berthd/berth/api"
)

// TestLostCheckStatusIsAskedAgain: berth upgrade signals again only for
// the refusal of an earlier release whose reaper took its check's exit
// status (the reason as lane 2's journal recorded it from the previous
// release, 09df814), never for a refusal that says what is wrong.
func TestLostCheckStatusIsAskedAgain(t *testing.T) {
	for _, c := range []struct {
		reason string
		again  bool
	}{
		{"hand-over refused: /usr/bin/berth does not run (waitid: no child processes): berth 3a14a21 (commit 3a14a21)", true},
		{"hand-over refused: /usr/bin/berth (berth 0.9) refuses the configuration file (exit status 1): line 3: unknown key", false},
		{"hand-over refused: /usr/bin/berth does not run (fork/exec /usr/bin/berth: exec format error): ", false},
		{"hand-over refused: the agent is joining, not a member (a lost session fences every job and joins again): try again once it is a member", false},
	} {
		if got := lostCheckStatus(&api.HandOverRefusal{Reason: c.reason}); got != c.again {
			t.Errorf("lostCheckStatus(%q) = %v, want %v", c.reason, got, c.again)
		}
	}
	if lostCheckStatus(nil) {
		t.Error("lostCheckStatus(nil) = true: no refusal is nothing to ask again")
	}
}
