package cgroup

import (
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Usage skips a v1 group's memory.oom_control while the host's count of
// OOM kills stays put, and still sees a kill in the group as soon as its
// reading of the host's count is fresher than the kill (at most
// hostOOMFresh later): the kill moves the host's count too.
func TestUsageSeesOOMKillAfterQuiet(t *testing.T) {
	needV1(t)
	h := testHierarchy(t)
	g, err := h.New("jobs/oom", &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: ptr(int64(16 << 20))}})
	if err != nil {
		t.Fatal(err)
	}
	if g.h.v1Dir(cgroup1.Memory, g.rel) == "" {
		t.Skip("no v1 memory controller")
	}
	// Until Usage remembers the count: the host's count quiet for
	// oomSettle (another OOM kill on the host only delays it).
	var before Usage
	if !testutil.Poll(testutil.Deadline(20*time.Second), func() bool {
		before, err = g.Usage()
		return err == nil && g.oom.Load() != nil
	}) {
		t.Fatalf("Usage never remembered the OOM kill count (last: %+v, %v)", before, err)
	}
	if _, err := g.Usage(); err != nil || g.oom.Load() == nil {
		t.Fatalf("a second Usage read the count again: %v", err)
	}
	j := startIn(t, g, "exec /usr/bin/tail /dev/zero")
	if err := j.wait(t, testutil.Deadline(30*time.Second)); !signaled(err, unix.SIGKILL) {
		t.Fatalf("balloon in 16 MiB: %v, want killed by the OOM killer", err)
	}
	// The host's count Usage compares with may be up to hostOOMFresh old:
	// once the last reading is older, Usage must see the kill at once.
	if !testutil.Poll(testutil.Deadline(5*time.Second), func() bool {
		r := hostOOM.last.Load()
		return r == nil || time.Since(r.at) > hostOOMFresh
	}) {
		t.Fatal("the host's OOM kill count reading never aged")
	}
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	full, err := g.FullUsage()
	if err != nil {
		t.Fatal(err)
	}
	if u.OOMKills < before.OOMKills+1 || u.OOMKills != full.OOMKills {
		t.Errorf("OOM kills: %d before, Usage %d right after the kill, FullUsage %d; want one more, agreeing", before.OOMKills, u.OOMKills, full.OOMKills)
	}
}

// A cgroup directory's link count tells whether it has child cgroups
// (hasSubdirs), in cgroup2 and in the v1 memory controller, so that a
// walk of a job's tree (subtree: its v1 OOM kills) skips listing a
// leaf's control files and still finds a child made below it.
func TestSubtreeFindsChildCgroupsByLinkCount(t *testing.T) {
	h := testHierarchy(t)
	g, err := h.New("jobs/tree", nil)
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]func(string) string{
		"cgroup2":   g.h.unifiedDir,
		"v1 memory": func(r string) string { return g.h.v1Dir(cgroup1.Memory, r) },
	}
	tried := 0
	for name, dir := range dirs {
		d := dir(g.rel)
		if d == "" {
			continue
		}
		tried++
		if hasSubdirs(d) {
			t.Errorf("%s: %s has no child cgroup, but hasSubdirs says it may", name, d)
		}
		if got := h.subtree(g.rel, dir); len(got) != 1 {
			t.Errorf("%s: subtree of a leaf %v, want only %s", name, got, g.rel)
		}
		child := d + "/child"
		if err := unix.Mkdir(child, 0o755); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !hasSubdirs(d) {
			t.Errorf("%s: %s has a child cgroup, but hasSubdirs says none", name, d)
		}
		got := h.subtree(g.rel, dir)
		if err := unix.Rmdir(child); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != 2 || got[1] != g.rel+"/child" {
			t.Errorf("%s: subtree %v, want %s and its child", name, got, g.rel)
		}
	}
	if tried == 0 {
		t.Skip("neither cgroup2 nor the v1 memory controller is mounted for the test hierarchy")
	}
}
