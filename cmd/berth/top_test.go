package main

import (
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/limits"
)

func TestTopRows(t *testing.T) {
	full := 0.0
	prev := map[string]api.Job{
		"a": {ID: "a", Usage: &api.Usage{GroupUsage: api.GroupUsage{CPUSeconds: 10, IOReadBytes: 1000, IOWriteBytes: 0},
			Pressure: &api.Pressure{CPU: api.Stall{SomeSeconds: 1}, Memory: api.Stall{SomeSeconds: 2, FullSeconds: &full}}}},
		"b": {ID: "b", Usage: &api.Usage{GroupUsage: api.GroupUsage{CPUSeconds: 50}}},
	}
	cur := []api.Job{
		{ID: "a", State: "running", Restarts: 2, Limits: limits.Limits{CPU: 1.5},
			Usage: &api.Usage{GroupUsage: api.GroupUsage{CPUSeconds: 11, MemoryBytes: 100, MemoryLimitBytes: 400, IOReadBytes: 3000, IOWriteBytes: 4096},
				Pressure: &api.Pressure{CPU: api.Stall{SomeSeconds: 1.5}, Memory: api.Stall{SomeSeconds: 2}}}},
		{ID: "b", State: "running", Usage: &api.Usage{GroupUsage: api.GroupUsage{CPUSeconds: 1}}}, // cgroup made anew: counters went back
		{ID: "c", State: "backoff"}, // no usage, no earlier sample
	}
	rows := topRows(prev, cur, 2*time.Second, "cpu")
	if len(rows) != 3 || rows[0].ID != "a" {
		t.Fatalf("rows = %+v", rows)
	}
	a := rows[0]
	if a.CPU != 50 || a.ReadBPS != 1000 || a.WriteBPS != 2048 || a.PSI != [3]float64{25, 0, 0} || a.CPULimit != 1.5 || a.Memory != 100 || a.MemLimit != 400 {
		t.Errorf("a = %+v: want CPU 50%%, read 1000 B/s, write 2048 B/s, PSI cpu 25%% memory 0%% io 0%%", a)
	}
	if b := rows[1]; b.CPU != -1 || b.PSI[0] != -1 {
		t.Errorf("b = %+v: CPU went back (a new cgroup): want CPU unknown; no pressure: unknown", b)
	}
	if c := rows[2]; c.CPU != -1 || c.ReadBPS != -1 || c.WriteBPS != -1 || c.PSI[0] != -1 || c.HasUsage {
		t.Errorf("c = %+v: want every rate unknown", c)
	}
	if got := topRows(prev, cur, time.Second, "job"); got[0].ID != "a" || got[1].ID != "b" || got[2].ID != "c" {
		t.Errorf("sorted by job: %v %v %v", got[0].ID, got[1].ID, got[2].ID)
	}
	if got := topRows(prev, cur, time.Second, "restarts"); got[0].ID != "a" {
		t.Errorf("sorted by restarts: %v first", got[0].ID)
	}

	tp := &top{addr: "127.0.0.1:9750", delay: time.Second, order: "cpu", rows: rows,
		agent: api.Agent{ID: "host-a", State: "member", Generation: 3}}
	lines := tp.frame(60, 5)
	if len(lines) != 5 {
		t.Errorf("frame(60, 5) has %d lines", len(lines))
	}
	for _, l := range lines {
		if len(l) > 60 {
			t.Errorf("line longer than 60: %q", l)
		}
	}
	all := strings.Join(tp.frame(0, 0), "\n")
	for _, want := range []string{"host-a member, generation 3, 3 jobs (2 running, 1 backoff)", "50.0", "1.50", "25.0", "1000B", "2.0KiB"} {
		if !strings.Contains(all, want) {
			t.Errorf("frame lacks %q:\n%s", want, all)
		}
	}
}
