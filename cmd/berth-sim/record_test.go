package main

import (
	"errors"
	"testing"
	"time"
)

// The checker finds a job started by a member while another runs it, and
// only then.
func TestCheckFindsDoubleRuns(t *testing.T) {
	t0 := time.Now()
	ok := []event{
		{job: "j", member: "a", start: true, at: t0},
		{job: "j", member: "a", at: t0},
		{job: "j", member: "b", start: true, at: t0},
		{job: "k", member: "b", start: true, at: t0},
		{job: "k", member: "b", start: true, at: t0}, // a restart by the same member
	}
	if d, running := check(ok); len(d) != 0 || running["j"] != "b" || running["k"] != "b" {
		t.Fatalf("check(ok) = %v, %v", d, running)
	}
	bad := append(ok, event{job: "j", member: "c", start: true, at: t0})
	if d, _ := check(bad); len(d) != 1 {
		t.Fatalf("check(bad) found %v, want one double run", d)
	}
	// A stop by a member that does not run the job does not end the run.
	late := append(ok, event{job: "j", member: "a", at: t0}, event{job: "j", member: "c", start: true, at: t0})
	if d, _ := check(late); len(d) != 1 {
		t.Fatalf("check(late) found %v, want one double run", d)
	}
	r := newRecorder()
	r.started("a", []string{"x"})
	if err := r.checkDoubles(); err != nil {
		t.Fatalf("checkDoubles after one start = %v, want nil", err)
	}
	r.started("b", []string{"x"})
	if len(r.doubles) != 1 {
		t.Fatalf("recorder saw %v, want one double run", r.doubles)
	}
	if err := r.checkDoubles(); !errors.Is(err, errDoubleRun) {
		t.Fatalf("checkDoubles after a double run = %v, want errDoubleRun", err)
	}
}
