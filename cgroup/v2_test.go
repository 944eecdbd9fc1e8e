package cgroup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// On cgroup v2 the limits land in the v2 files, and the exact cpu.weight and
// memory.high given in Unified win over the lossy shares→weight conversion.
// Runs in the v2 VM lane; skipped on this hybrid host.
func TestUnifiedLimitsLand(t *testing.T) {
	needUnified(t)
	h := testHierarchy(t)
	if h.Mode() != Unified {
		t.Fatalf("Mode() = %s", h.Mode())
	}
	_, err := h.New("jobs/v2", &specs.LinuxResources{
		CPU:     &specs.LinuxCPU{Shares: ptr(uint64(1024)), Quota: ptr(int64(33300)), Period: ptr(uint64(100000))},
		Memory:  &specs.LinuxMemory{Limit: ptr(int64(64 << 20)), Swap: ptr(int64(64 << 20))},
		Pids:    &specs.LinuxPids{Limit: ptr(int64(64))},
		Unified: map[string]string{"cpu.weight": "123", "memory.high": strconv.Itoa(48 << 20)},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := h.unifiedDir("jobs/v2")
	for file, want := range map[string]string{
		"cpu.max":     "33300 100000",
		"cpu.weight":  "123",
		"memory.max":  strconv.Itoa(64 << 20),
		"memory.high": strconv.Itoa(48 << 20),
		"pids.max":    "64",
	} {
		if got := readFile(t, filepath.Join(dir, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
		if got := readFile(t, filepath.Join(dir, "memory.swap.max")); got != "0" {
			t.Errorf("memory.swap.max = %q, want 0 (swap off)", got)
		}
	}
	if g := (&Group{h: h, rel: "jobs/v2"}); len(g.Placement().ProcsFiles) != 0 {
		t.Errorf("ProcsFiles on v2 = %v, want none", g.Placement().ProcsFiles)
	}
}

// An agent started in the root of its delegated
// cgroup moves itself into <root>/agent, then enabling controllers succeeds;
// Prepare again is a no-op. A sleep stands in for the agent.
func TestUnifiedPrepareDelegatedMovesAgent(t *testing.T) {
	needUnified(t)
	outer := testHierarchy(t) // a unique, cleaned-up root to delegate
	root := filepath.Join(outer.Root(), "delegated")
	dir := filepath.Join(mountRoot, root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := exec.Command("sleep", "1000")
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = agent.Wait(); close(done) }()
	t.Cleanup(func() { _ = agent.Process.Kill(); <-done })
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(agent.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	h, err := OpenDelegated(root)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := h.Prepare(); err != nil {
			t.Fatalf("Prepare #%d: %v", i+1, err)
		}
	}
	if got := readFile(t, filepath.Join(dir, "cgroup.procs")); got != "" {
		t.Errorf("root still holds processes %q", got)
	}
	if got := readFile(t, filepath.Join(dir, AgentDir, "cgroup.procs")); got != strconv.Itoa(agent.Process.Pid) {
		t.Errorf("%s/agent holds %q, want the agent", root, got)
	}
	avail := strings.Fields(readFile(t, filepath.Join(dir, "cgroup.controllers")))
	for _, d := range []string{dir, filepath.Join(dir, JobsDir), filepath.Join(dir, GroupsDir)} {
		on := strings.Fields(readFile(t, filepath.Join(d, "cgroup.subtree_control")))
		for _, c := range v2Controllers {
			if slices.Contains(avail, c) && !slices.Contains(on, c) {
				t.Errorf("%s not enabled in %s/cgroup.subtree_control (%v)", c, d, on)
			}
		}
	}
	g, err := h.New("jobs/x", &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: ptr(int64(8))}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(5*time.Second))
	defer cancel()
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
}

// memory.high is enforced on cgroup v2: a job that grows past it is
// throttled and reclaimed (memory.events "high" counts the breaches), not
// OOM-killed, while memory.max is far away (cgroup-v2.rst, "memory.high").
// Runs in the v2 VM lane; skipped on this hybrid host.
func TestUnifiedMemoryHighThrottles(t *testing.T) {
	needUnified(t)
	h := testHierarchy(t)
	g, err := h.New("jobs/high", &specs.LinuxResources{
		Memory:  &specs.LinuxMemory{Limit: ptr(int64(256 << 20)), Swap: ptr(int64(256 << 20))},
		Unified: map[string]string{"memory.high": strconv.Itoa(16 << 20)},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := h.unifiedDir("jobs/high")
	j := startIn(t, g, "exec tail /dev/zero")
	events := func() (high, oomKill uint64) {
		for _, line := range strings.Split(readFile(t, filepath.Join(dir, "memory.events")), "\n") {
			k, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseUint(v, 10, 64)
			switch k {
			case "high":
				high = n
			case "oom_kill":
				oomKill = n
			}
		}
		return
	}
	if !testutil.Poll(20*time.Second, func() bool { high, _ := events(); return high > 0 }) {
		t.Fatalf("memory.events high stayed 0 with memory.high = 16 MiB: %s", readFile(t, filepath.Join(dir, "memory.events")))
	}
	_, oom := events()
	if oom != 0 || j.exited() {
		t.Fatalf("memory.high killed the job (oom_kill %d, exited %v); it must only throttle", oom, j.exited())
	}
	// Throttled, not stopped: usage stays near memory.high, far below memory.max.
	cur, err := strconv.ParseUint(readFile(t, filepath.Join(dir, "memory.current")), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if cur > 128<<20 {
		t.Errorf("memory.current = %d with memory.high = 16 MiB: not held back", cur)
	}
}
