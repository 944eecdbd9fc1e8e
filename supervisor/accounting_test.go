package supervisor

import "testing"

func TestCounterSurvivesReset(t *testing.T) {
	var c counter
	for _, step := range []struct{ in, want float64 }{{1, 1}, {5, 5}, {2, 7}, {3, 8}, {0, 8}, {4, 12}} {
		if got := c.observe(step.in); got != step.want {
			t.Fatalf("observe(%v) = %v, want %v", step.in, got, step.want)
		}
	}
}

func TestJobAccountKeepsExitedProcesses(t *testing.T) {
	a := newJobAccount()
	p1, p2 := procKey{pid: 10, start: 1}, procKey{pid: 11, start: 2}
	tot := a.update(map[procKey]procTotals{p1: {readBytes: 100}, p2: {readBytes: 50}})
	if tot.readBytes != 150 {
		t.Fatalf("total %v, want 150", tot.readBytes)
	}
	// p1 exits; its 100 bytes stay counted.
	tot = a.update(map[procKey]procTotals{p2: {readBytes: 60}})
	if tot.readBytes != 160 {
		t.Fatalf("after exit: total %v, want 160", tot.readBytes)
	}
	// PID 10 is reused by a new process: a new key, counted from zero.
	tot = a.update(map[procKey]procTotals{p2: {readBytes: 60}, {pid: 10, start: 9}: {readBytes: 5}})
	if tot.readBytes != 165 {
		t.Fatalf("after reuse: total %v, want 165", tot.readBytes)
	}
}
