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

func TestProcAccountKeepsExitedProcesses(t *testing.T) {
	a := &procAccount{}
	const agent = 1
	main, child := procKey{pid: 10, start: 1}, procKey{pid: 11, start: 2}
	// The child first: update sorts what a scrape read.
	tot := a.update(procSet{
		{child, procReading{ppid: 10, totals: procTotals{readBytes: 50, volCtx: 2}}},
		{main, procReading{ppid: agent, totals: procTotals{readBytes: 100, volCtx: 1}}},
	})
	if tot.readBytes != 150 || tot.volCtx != 3 {
		t.Fatalf("total %+v, want 150 bytes, 3 switches", tot)
	}
	// child exits as a zombie: its counters are carried over.
	tot = a.update(procSet{
		{main, procReading{ppid: agent, totals: procTotals{readBytes: 100, volCtx: 1}}},
		{child, procReading{ppid: 10, zombie: true}},
	})
	if tot.readBytes != 150 || tot.volCtx != 3 {
		t.Fatalf("zombie: total %+v, want 150 bytes, 3 switches", tot)
	}
	// main reaps it: the kernel adds the child's I/O (60 at its end) to
	// main's; context switches are not passed on and stay in gone.
	tot = a.update(procSet{{main, procReading{ppid: agent, totals: procTotals{readBytes: 160, volCtx: 1}}}})
	if tot.readBytes != 160 || tot.volCtx != 3 {
		t.Fatalf("after reap: total %+v, want 160 bytes, 3 switches", tot)
	}
	// main exits, reaped by the agent (outside the job): its reading stays.
	tot = a.update(a.scratch())
	if tot.readBytes != 160 || tot.volCtx != 3 {
		t.Fatalf("after main exit: total %+v, want 160 bytes, 3 switches", tot)
	}
	// PID 10 reused by a new process: a new key, counted from zero.
	tot = a.update(procSet{{procKey{pid: 10, start: 9}, procReading{ppid: agent, totals: procTotals{readBytes: 5}}}})
	if tot.readBytes != 165 {
		t.Fatalf("after reuse: total %+v, want 165", tot)
	}
}

// A job of many processes read in any order: each one's reading is
// matched to its last one (counters never go down), and one that exited
// is carried over once.
func TestProcAccountMatchesProcessesInAnyOrder(t *testing.T) {
	a := &procAccount{}
	const n = 100
	scrape := func(order func(i int) int, bytes func(i int) float64, skip int) procTotals {
		s := a.scratch()
		for k := range n {
			i := order(k)
			if i == skip {
				continue
			}
			s = append(s, procEntry{procKey{pid: 1000 + i, start: uint64(i)}, procReading{ppid: 1, totals: procTotals{readBytes: bytes(i), volCtx: 1}}})
		}
		return a.update(s)
	}
	id := func(i int) int { return i }
	rev := func(i int) int { return n - 1 - i }
	if tot := scrape(rev, func(i int) float64 { return 10 }, -1); tot.readBytes != 10*n || tot.volCtx != n {
		t.Fatalf("first scrape: %+v", tot)
	}
	// Every process reads 0 bytes now (a racing exit read as zeros): the
	// last readings hold.
	if tot := scrape(id, func(i int) float64 { return 0 }, -1); tot.readBytes != 10*n || tot.volCtx != n {
		t.Fatalf("second scrape: %+v", tot)
	}
	// Process 42 exited, reaped outside the job: its reading is kept once.
	if tot := scrape(rev, func(i int) float64 { return 20 }, 42); tot.readBytes != 20*(n-1)+10 || tot.volCtx != n {
		t.Fatalf("third scrape: %+v", tot)
	}
	if tot := scrape(id, func(i int) float64 { return 20 }, 42); tot.readBytes != 20*(n-1)+10 || tot.volCtx != n {
		t.Fatalf("fourth scrape: %+v", tot)
	}
}
