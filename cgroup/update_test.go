package cgroup

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// cpu = 0.333 gives a quota that an update changing
// only memory leaves exactly as the kernel holds it: cpu.cfs_quota_us and
// cpu.cfs_period_us on v1, cpu.max on v2.
func TestQuotaStableAcrossMemoryUpdate(t *testing.T) {
	needCgroups(t)
	h := testHierarchy(t)
	cpu := &specs.LinuxCPU{Quota: ptr(int64(33300)), Period: ptr(uint64(100000))}
	g, err := h.New("jobs/c6", &specs.LinuxResources{CPU: cpu, Memory: &specs.LinuxMemory{Limit: ptr(int64(256 << 20)), Swap: ptr(int64(256 << 20))}})
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		if h.Mode() == Unified {
			return readFile(t, filepath.Join(h.unifiedDir("jobs/c6"), "cpu.max"))
		}
		return readFile(t, filepath.Join(h.v1Dir("cpu", "jobs/c6"), "cpu.cfs_quota_us")) + " " +
			readFile(t, filepath.Join(h.v1Dir("cpu", "jobs/c6"), "cpu.cfs_period_us"))
	}
	memFile := filepath.Join(h.v1Dir("memory", "jobs/c6"), "memory.limit_in_bytes")
	if h.Mode() == Unified {
		memFile = filepath.Join(h.unifiedDir("jobs/c6"), "memory.max")
	}
	q0 := read()
	if q0 != "33300 100000" {
		t.Fatalf("quota period = %s, want 33300 100000", q0)
	}
	// The reload re-sends the same CPU settings with a new memory limit,
	// and a second reload sends memory only.
	for _, res := range []*specs.LinuxResources{
		{CPU: cpu, Memory: &specs.LinuxMemory{Limit: ptr(int64(512 << 20)), Swap: ptr(int64(512 << 20))}},
		{Memory: &specs.LinuxMemory{Limit: ptr(int64(128 << 20)), Swap: ptr(int64(128 << 20))}},
	} {
		if err := g.Update(res); err != nil {
			t.Fatal(err)
		}
		if q := read(); q != q0 {
			t.Errorf("after memory update quota period = %s, want %s", q, q0)
		}
	}
	if got := readFile(t, memFile); got != "134217728" {
		t.Errorf("%s = %s, want 134217728", memFile, got)
	}
}

// Update applies new limits in place: the running process keeps its pid and
// its group, and the new values are what the kernel holds.
func TestUpdateInPlaceKeepsProcess(t *testing.T) {
	h := testHierarchy(t)
	g, err := h.New("jobs/upd", &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: ptr(int64(50000)), Period: ptr(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: ptr(int64(64 << 20)), Swap: ptr(int64(64 << 20))},
		Pids:   &specs.LinuxPids{Limit: ptr(int64(10))},
	})
	if err != nil {
		t.Fatal(err)
	}
	j := startIn(t, g, "exec sleep 1000")
	pid := j.cmd.Process.Pid
	if !testutil.Poll(5*time.Second, func() bool { p, _ := g.Pids(); return len(p) == 1 && p[0] == pid }) {
		t.Fatal("sleep not in group")
	}
	if err := g.Update(&specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: ptr(int64(150000)), Period: ptr(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: ptr(int64(128 << 20)), Swap: ptr(int64(128 << 20))},
		Pids:   &specs.LinuxPids{Limit: ptr(int64(0))},
	}); err != nil {
		t.Fatal(err)
	}
	if j.exited() || !alive(pid) {
		t.Fatal("process died on Update")
	}
	if p, err := g.Pids(); err != nil || len(p) != 1 || p[0] != pid {
		t.Errorf("Pids after Update = %v, %v; want [%d]", p, err, pid)
	}
	s, err := g.FullUsage()
	if err != nil {
		t.Fatal(err)
	}
	if s.Limits.CPUQuotaCores != 1.5 {
		t.Errorf("CPUQuotaCores = %v, want 1.5", s.Limits.CPUQuotaCores)
	}
	if s.Limits.MemoryLimitBytes != 128<<20 || s.Limits.PidsLimit != 0 {
		t.Errorf("after Update MemoryLimitBytes=%d PidsLimit=%d; want %d and 0 (unlimited)", s.Limits.MemoryLimitBytes, s.Limits.PidsLimit, 128<<20)
	}
	if d := h.v1Dir("cpu", "jobs/upd"); d != "" {
		if got := readFile(t, filepath.Join(d, "cpu.cfs_quota_us")); got != "150000" {
			t.Errorf("cpu.cfs_quota_us = %s, want 150000", got)
		}
	}
	if d := h.unifiedDir("jobs/upd"); h.Mode() == Unified {
		if got := readFile(t, filepath.Join(d, "cpu.max")); got != "150000 100000" {
			t.Errorf("cpu.max = %s", got)
		}
	}
}

// On v1, Unified keys (memory.high) are reported as not enforced; the
// kernel's defaults a removed limit is written as (limits.Lift) are not.
func TestUnenforcedOnV1(t *testing.T) {
	res := &specs.LinuxResources{Unified: map[string]string{"memory.high": "1000000", "cpu.weight": "300"}}
	if n := Unenforced(Hybrid, res); len(n) != 2 {
		t.Errorf("Unenforced(hybrid) = %v, want 2 notes", n)
	}
	lifted := &specs.LinuxResources{Unified: map[string]string{"memory.high": "max", "cpu.weight": "100", "io.weight": "default 100"}}
	if n := Unenforced(Hybrid, lifted); len(n) != 0 {
		t.Errorf("Unenforced(hybrid) of the defaults = %v, want none", n)
	}
	if n := Unenforced(Unified, res); len(n) != 0 {
		t.Errorf("Unenforced(unified) = %v, want none", n)
	}
}
