package cgroup

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// alive reports whether pid still exists (and is not a zombie).
func alive(pid int) bool {
	return len(livePids([]int{pid})) == 1
}

// Every process of a forking tree dies, the
// grandchildren included, and the group can then be removed.
func TestKillForkingTree(t *testing.T) {
	h := testHierarchy(t)
	g, err := h.New("jobs/tree", &specs.LinuxResources{})
	if err != nil {
		t.Fatal(err)
	}
	j := startIn(t, g, `sh -c "sleep 1000 & sleep 1000" & wait`)
	var before []int
	if !testutil.Poll(5*time.Second, func() bool {
		before, err = g.Pids()
		return err == nil && len(before) == 4
	}) {
		t.Fatalf("want 4 processes in the group, have %v (%v)", before, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if pids, err := g.Pids(); err != nil || len(pids) != 0 {
		t.Fatalf("after Kill, Pids() = %v, %v", pids, err)
	}
	if err := j.wait(t, 5*time.Second); !signaled(err, unix.SIGKILL) {
		t.Errorf("job exit = %v, want SIGKILL", err)
	}
	reapOrphans()
	for _, pid := range before {
		if !testutil.Poll(2*time.Second, func() bool { return !alive(pid) }) {
			t.Errorf("process %d survived Kill", pid)
		}
	}
	if err := g.Delete(ctx); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

// A TERM-ignoring loop is killed, the
// group is removed without error, and no goroutine of Delete keeps running.
func TestKillTermIgnoringLoopAndDelete(t *testing.T) {
	h := testHierarchy(t)
	g, err := h.New("jobs/stubborn", &specs.LinuxResources{})
	if err != nil {
		t.Fatal(err)
	}
	j := startIn(t, g, `trap "" TERM; while :; do sleep 1; done`)
	if !testutil.Poll(5*time.Second, func() bool {
		pids, _ := g.Pids()
		return len(pids) >= 2
	}) {
		t.Fatal("loop did not start its sleep")
	}
	_ = j.cmd.Process.Signal(unix.SIGTERM)
	if testutil.Poll(300*time.Millisecond, j.exited) {
		t.Fatal("TERM-ignoring loop exited on SIGTERM: the test proves nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := j.wait(t, 5*time.Second); !signaled(err, unix.SIGKILL) {
		t.Errorf("exit = %v, want SIGKILL", err)
	}
	dirs := h.dirs("jobs/stubborn")
	if err := g.Delete(ctx); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists after Delete (%v)", d, err)
		}
	}
}

// Kill of a group that only v1 holds (the unified directory does not have
// the process) still empties it: freeze, kill, thaw.
func TestKillV1OnlyProcess(t *testing.T) {
	needV1(t)
	h := testHierarchy(t)
	g, err := h.New("jobs/v1only", &specs.LinuxResources{})
	if err != nil {
		t.Fatal(err)
	}
	j := startIn(t, g, `while :; do sh -c 'sleep 1000' & sleep 0.01; done`)
	if !testutil.Poll(5*time.Second, func() bool { p, _ := g.Pids(); return len(p) >= 3 }) {
		t.Fatal("forking loop did not start")
	}
	// Move the tree out of the unified group so cgroup.kill cannot reach it;
	// new forks inherit the unified root, so the tree stays v1-only.
	if u := g.Placement().UnifiedDir; u != "" {
		// A fork between listing and moving lands in the group: repeat.
		if !testutil.Poll(5*time.Second, func() bool {
			pids, _ := procsRecursive(u)
			for _, p := range pids {
				_ = os.WriteFile(filepath.Join(hybridUnifiedMount, "cgroup.procs"), []byte(strconv.Itoa(p)), 0)
			}
			left, _ := procsRecursive(u)
			return len(left) == 0
		}) {
			t.Fatal("could not move the tree out of the unified group")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if pids, err := g.Pids(); err != nil || len(pids) != 0 {
		t.Fatalf("after Kill, Pids() = %v, %v", pids, err)
	}
	if err := j.wait(t, 5*time.Second); !signaled(err, unix.SIGKILL) {
		t.Errorf("exit = %v, want SIGKILL", err)
	}
	if got := readFile(t, filepath.Join(h.v1Dir("freezer", "jobs/v1only"), "freezer.state")); got != "THAWED" {
		t.Errorf("freezer.state = %s after Kill, want THAWED", got)
	}
}
