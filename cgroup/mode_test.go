package cgroup

import (
	"os"
	"path"
	"path/filepath"
	"testing"

	cgroups "github.com/containerd/cgroups/v3"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// On a hybrid host the v1 controllers do the work and
// the controller-less cgroup2 mount carries no limit.
func TestHybridUsesV1ForLimits(t *testing.T) {
	needCgroups(t)
	if DetectMode() != Hybrid {
		t.Skipf("host mode is %s, not hybrid", DetectMode())
	}
	h := testHierarchy(t)
	if h.Mode() != Hybrid {
		t.Fatalf("Mode() = %s, want hybrid", h.Mode())
	}
	g, err := h.New("jobs/c8", &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: ptr(int64(50000)), Period: ptr(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: ptr(int64(64 << 20)), Swap: ptr(int64(64 << 20))},
		Pids:   &specs.LinuxPids{Limit: ptr(int64(64))},
	})
	if err != nil {
		t.Fatal(err)
	}
	cpu := h.v1Dir("cpu", "jobs/c8")
	if got := readFile(t, filepath.Join(cpu, "cpu.cfs_quota_us")); got != "50000" {
		t.Errorf("cpu.cfs_quota_us = %s, want 50000", got)
	}
	mem := h.v1Dir("memory", "jobs/c8")
	if got := readFile(t, filepath.Join(mem, "memory.limit_in_bytes")); got != "67108864" {
		t.Errorf("memory.limit_in_bytes = %s, want 67108864", got)
	}
	if got := readFile(t, filepath.Join(h.v1Dir("pids", "jobs/c8"), "pids.max")); got != "64" {
		t.Errorf("pids.max = %s, want 64", got)
	}
	p := g.Placement()
	if p.UnifiedDir != filepath.Join(hybridUnifiedMount, h.Root(), "jobs/c8") {
		t.Errorf("UnifiedDir = %q", p.UnifiedDir)
	}
	if len(p.ProcsFiles) != len(h.Controllers()) || len(p.ProcsFiles) == 0 {
		t.Errorf("ProcsFiles = %v, controllers %v", p.ProcsFiles, h.Controllers())
	}
	// Nothing limit-like exists or is enabled in the unified directory.
	for _, f := range []string{"cpu.max", "memory.max", "pids.max", "io.max"} {
		if _, err := os.Stat(filepath.Join(p.UnifiedDir, f)); err == nil {
			t.Errorf("%s exists in the unified hierarchy", f)
		}
	}
	if got := readFile(t, filepath.Join(p.UnifiedDir, "cgroup.subtree_control")); got != "" {
		t.Errorf("unified cgroup.subtree_control = %q, want empty", got)
	}
}

func TestOpenRejectsEscapingPaths(t *testing.T) {
	needCgroups(t)
	if _, err := Open("../etc"); err == nil {
		t.Error("Open(\"../etc\") succeeded")
	}
	h := testHierarchy(t)
	if _, err := h.New("/abs", nil); err == nil {
		t.Error("New with an absolute path succeeded")
	}
	if _, err := h.New("jobs/../../x", nil); err == nil {
		t.Error("New with .. succeeded")
	}
	if _, err := h.New("", nil); err == nil {
		t.Error("New of the root succeeded")
	}
}

// Prepare is idempotent (a restarted agent runs it again).
func TestPrepareIdempotent(t *testing.T) {
	h := testHierarchy(t)
	for i := 0; i < 2; i++ {
		if err := h.Prepare(); err != nil {
			t.Fatalf("Prepare #%d: %v", i+2, err)
		}
	}
	for _, sub := range Subtrees() {
		for _, d := range h.dirs(sub) {
			if st, err := os.Stat(d); err != nil || !st.IsDir() {
				t.Errorf("%s missing after Prepare: %v", d, err)
			}
		}
		if cs := h.v1Dir("cpuset", sub); cs != "" {
			if got := readFile(t, filepath.Join(cs, "cpuset.cpus")); got == "" {
				t.Errorf("v1 cpuset.cpus of %s is empty: tasks could not join", sub)
			}
		}
	}
}

// Open("") roots berth at this process's own cgroup in every hierarchy (the
// systemd Delegate=yes case), per /proc/self/cgroup.
func TestOpenOwnCgroup(t *testing.T) {
	needCgroups(t)
	h, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	v1, unified, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for name, base := range h.v1Roots {
		if want := path.Clean("/" + v1[string(name)]); base != want {
			t.Errorf("v1 root of %s = %q, want %q", name, base, want)
		}
	}
	if h.unifiedMount != "" && h.unifiedRoot != path.Clean("/"+unified) {
		t.Errorf("unified root = %q, want %q", h.unifiedRoot, unified)
	}
	if !h.delegated {
		t.Error("own cgroup not treated as delegated")
	}
}

// A job's v1 cpuset starts with its parent's CPUs and memory nodes by the
// kernel's cgroup.clone_children, which Prepare sets on the subtrees, and
// a job's CPU limit at the default period leaves cpu.cfs_period_us alone
// (both spare writes whose kernel cost grows with the number of cgroups).
func TestV1JobCpusetClonedAndPeriodKept(t *testing.T) {
	needV1(t)
	h := testHierarchy(t)
	cs := h.v1Dir("cpuset", JobsDir)
	if cs == "" {
		t.Skip("no v1 cpuset controller in use")
	}
	if got := readFile(t, filepath.Join(cs, "cgroup.clone_children")); got != "1" {
		t.Fatalf("cgroup.clone_children of %s = %q, want 1", JobsDir, got)
	}
	res := &specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: ptr(int64(10000)), Period: ptr(uint64(100000))}}
	if _, err := h.New("jobs/cloned", res); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		if got, want := readFile(t, filepath.Join(cs, "cloned", f)), readFile(t, filepath.Join(cs, f)); got == "" || got != want {
			t.Errorf("%s of the job = %q, want its parent's %q", f, got, want)
		}
	}
	if cpu := h.v1Dir("cpu", "jobs/cloned"); cpu != "" {
		if got := readFile(t, filepath.Join(cpu, "cpu.cfs_quota_us")); got != "10000" {
			t.Errorf("cpu.cfs_quota_us = %q, want 10000", got)
		}
		if got := readFile(t, filepath.Join(cpu, "cpu.cfs_period_us")); got != "100000" {
			t.Errorf("cpu.cfs_period_us = %q, want 100000", got)
		}
	}
	// A period other than the default is still written.
	res.CPU.Period, res.CPU.Quota = ptr(uint64(50000)), ptr(int64(5000))
	g, err := h.New("jobs/period", res)
	if err != nil {
		t.Fatal(err)
	}
	if cpu := h.v1Dir("cpu", g.Path()); cpu != "" {
		if got := readFile(t, filepath.Join(cpu, "cpu.cfs_period_us")); got != "50000" {
			t.Errorf("cpu.cfs_period_us = %q, want 50000", got)
		}
	}
}
