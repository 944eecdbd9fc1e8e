package guard

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// A guard that serves another cgroup_root than the agent's is refused
// before the hello (C31): Check and Start say so, naming both roots, and
// the guard keeps its agent and deadline.
func TestGuardOfAnotherRootRefused(t *testing.T) {
	w := newWorld(t)
	c, _ := w.connect()
	c.Deadline(time.Now().Add(time.Minute))
	w.acked(c)
	pid := c.PID()

	other := w.options()
	other.CgroupRoot = w.root + "-other"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Check(ctx, other)
	if !errors.Is(err, ErrForeign) {
		t.Fatalf("Check with another cgroup_root = %v, want ErrForeign", err)
	}
	for _, want := range []string{`serves cgroup_root "` + w.root + `"`, `cgroup_root "` + other.CgroupRoot + `"`, w.dataDir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if c2, err := Start(ctx, other); !errors.Is(err, ErrForeign) {
		if c2 != nil {
			c2.Close()
		}
		t.Fatalf("Start with another cgroup_root = %v, want ErrForeign", err)
	}
	if err := Check(ctx, w.options()); err != nil {
		t.Errorf("Check with the guard's own cgroup_root: %v", err)
	}
	// Still the first client's guard: it answers its next deadline.
	c.Deadline(time.Now().Add(2 * time.Minute))
	w.acked(c)
	if c.PID() != pid {
		t.Errorf("guard pid %d, want %d", c.PID(), pid)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if err := c.Release(rctx); err != nil {
		t.Fatal(err)
	}
}

// A cgroup root whose guard leaf holds a guard of another data_dir is
// refused (C32): CheckRoot names both data_dirs, and a guard started for
// the other data_dir on that root does not enter the leaf.
func TestGuardOfAnotherDataDirInRootRefused(t *testing.T) {
	w := newWorld(t)
	c, _ := w.connect()
	c.Deadline(time.Now().Add(time.Minute))
	w.acked(c)
	if err := CheckRoot(w.h, w.dataDir); err != nil {
		t.Fatalf("CheckRoot with the guard's own data_dir: %v", err)
	}
	otherDir := t.TempDir()
	err := CheckRoot(w.h, otherDir)
	if !errors.Is(err, ErrForeign) {
		t.Fatalf("CheckRoot with another data_dir = %v, want ErrForeign", err)
	}
	for _, want := range []string{w.dataDir, otherDir, w.root} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}

	other := w.options()
	other.DataDir = otherDir
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c2, err := Start(ctx, other); err == nil {
		c2.Close()
		t.Fatal("a guard of another data_dir started on the root")
	}
	log, _ := os.ReadFile(filepath.Join(otherDir, logName))
	if !strings.Contains(string(log), ErrForeign.Error()) {
		t.Errorf("the other guard's log does not say why it did not start:\n%s", log)
	}
	g, err := w.h.Load(CgroupLeaf)
	if err != nil {
		t.Fatal(err)
	}
	pids, _ := g.Pids()
	if len(pids) != 1 || pids[0] != c.PID() {
		t.Errorf("processes in the guard leaf: %v, want only the guard %d", pids, c.PID())
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if err := c.Release(rctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the guard exits", func() bool { return !testutil.Alive(c.PID()) })
}

// servedBy reads a guard's --data-dir and --cgroup-root, in either form.
func TestServedBy(t *testing.T) {
	s, ok := servedBy(os.Getpid())
	if ok {
		t.Fatalf("the test process taken for a guard: %+v", s)
	}
	for _, args := range [][]string{
		{"--data-dir", "/d", "--cgroup-root", "r"},
		{"--data-dir=/d", "--cgroup-root=r"},
	} {
		b := []byte(strings.Join(append([]string{"berth", "guard"}, args...), "\x00") + "\x00")
		got, ok := parseServed(1, b)
		if !ok || got.dataDir != "/d" || got.cgroupRoot != "r" {
			t.Errorf("%q: %+v %v", args, got, ok)
		}
	}
}
