package metrics

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
	const agent = 1
	main, child := procKey{pid: 10, start: 1}, procKey{pid: 11, start: 2}
	tot := a.update(map[procKey]procReading{
		main:  {ppid: agent, totals: procTotals{readBytes: 100, volCtx: 1}},
		child: {ppid: 10, totals: procTotals{readBytes: 50, volCtx: 2}},
	})
	if tot.readBytes != 150 || tot.volCtx != 3 {
		t.Fatalf("total %+v, want 150 bytes, 3 switches", tot)
	}
	// child exits as a zombie: its counters are carried over.
	tot = a.update(map[procKey]procReading{
		main:  {ppid: agent, totals: procTotals{readBytes: 100, volCtx: 1}},
		child: {ppid: 10, zombie: true},
	})
	if tot.readBytes != 150 || tot.volCtx != 3 {
		t.Fatalf("zombie: total %+v, want 150 bytes, 3 switches", tot)
	}
	// main reaps it: the kernel adds the child's I/O (60 at its end) to
	// main's; context switches are not passed on and stay in gone.
	tot = a.update(map[procKey]procReading{main: {ppid: agent, totals: procTotals{readBytes: 160, volCtx: 1}}})
	if tot.readBytes != 160 || tot.volCtx != 3 {
		t.Fatalf("after reap: total %+v, want 160 bytes, 3 switches", tot)
	}
	// main exits, reaped by the agent (outside the job): its reading stays.
	tot = a.update(map[procKey]procReading{})
	if tot.readBytes != 160 || tot.volCtx != 3 {
		t.Fatalf("after main exit: total %+v, want 160 bytes, 3 switches", tot)
	}
	// PID 10 reused by a new process: a new key, counted from zero.
	tot = a.update(map[procKey]procReading{{pid: 10, start: 9}: {ppid: agent, totals: procTotals{readBytes: 5}}})
	if tot.readBytes != 165 {
		t.Fatalf("after reuse: total %+v, want 165", tot)
	}
}
