package cgroup

import (
	"os"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Usage's Limits are what New and Update wrote, as the kernel holds them
// (the memory limit in whole pages), and agree with what FullUsage reads
// back; Usage reads the same counters FullUsage does, from fewer files.
func TestUsageLimitsAndCounters(t *testing.T) {
	h := testHierarchy(t)
	mem := int64(64<<20 + 100) // not a whole number of pages
	g, err := h.New("jobs/usage", &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: ptr(int64(50000)), Period: ptr(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: &mem},
		Pids:   &specs.LinuxPids{Limit: ptr(int64(16))},
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(want Limits) {
		t.Helper()
		u, err := g.Usage()
		if err != nil {
			t.Fatal(err)
		}
		if u.Limits != want {
			t.Errorf("Usage().Limits = %+v, want %+v", u.Limits, want)
		}
		s, err := g.FullUsage()
		if err != nil {
			t.Fatal(err)
		}
		if s.Limits != u.Limits {
			t.Errorf("the kernel holds %+v; Usage says %+v", s.Limits, u.Limits)
		}
		// A Group loaded anew reads the kernel's limits once.
		l, err := h.Load(g.Path())
		if err != nil {
			t.Fatal(err)
		}
		if lu, err := l.Usage(); err != nil || lu.Limits != want {
			t.Errorf("Usage().Limits of the loaded group = %+v, %v; want %+v", lu.Limits, err, want)
		}
	}
	page := uint64(os.Getpagesize())
	check(Limits{CPUQuotaCores: 0.5, MemoryLimitBytes: uint64(mem) / page * page, PidsLimit: 16})
	// An update of the memory limit alone leaves the others as they were.
	mem2 := int64(32 << 20)
	if err := g.Update(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem2}}); err != nil {
		t.Fatal(err)
	}
	check(Limits{CPUQuotaCores: 0.5, MemoryLimitBytes: 32 << 20, PidsLimit: 16})

	startIn(t, g, "while :; do :; done")
	var u Usage
	if !testutil.Poll(10*time.Second, func() bool {
		u, err = g.Usage()
		return err == nil && u.CPUUserSeconds+u.CPUSystemSeconds > 0.05 && u.Pids >= 1 && u.MemoryBytes > 0
	}) {
		t.Fatalf("Usage = %+v, %v: no CPU time, task or memory accounted for a busy loop", u, err)
	}
	s, err := g.FullUsage()
	if err != nil {
		t.Fatal(err)
	}
	if u.Pids != s.Pids || u.OOMKills != s.OOMKills {
		t.Errorf("Usage %+v and FullUsage %+v disagree on pids or OOM kills", u, s)
	}
	if s.CPUUserSeconds+s.CPUSystemSeconds <= 0 || s.CPUUsageSeconds < u.CPUUsageSeconds || u.CPUUsageSeconds <= 0 {
		t.Errorf("no CPU time, or CPU time went down: Usage %+v, then FullUsage %+v", u, s)
	}
	if err := g.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Usage(); err == nil {
		t.Error("Usage of a deleted group: no error")
	}
}
