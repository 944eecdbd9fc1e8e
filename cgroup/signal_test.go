package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Signal reaches every process of the group, exactly once: the child a
// handler forks on receipt (a flush: `sleep 0.5 && echo`) is not signalled
// too, so each handler's line is written. A group that is gone signals
// nothing and is no error.
func TestSignalEveryProcessOnce(t *testing.T) {
	h := testHierarchy(t)
	g, err := h.New("jobs/sig", &specs.LinuxResources{})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "flushed")
	startIn(t, g, `trap 'sleep 0.5 && echo main >> `+out+`' USR1
sh -c 'trap "sleep 0.5 && echo child >> `+out+`; exit 0" USR1; while :; do sleep 0.05; done' &
while :; do sleep 0.05; done`)
	if !testutil.Poll(10*time.Second, func() bool {
		pids, err := g.Pids()
		return err == nil && len(pids) >= 4
	}) {
		t.Fatal("want the shell, its child and their sleeps in the group")
	}
	// The two shells live throughout; their 50 ms sleeps come and go, so
	// how many of those are signalled depends on the moment.
	n, err := g.Signal(unix.SIGUSR1)
	if err != nil || n < 2 {
		t.Fatalf("Signal = %d, %v; want at least the 2 shells signalled", n, err)
	}
	var got string
	if !testutil.Poll(20*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		got = string(b)
		return strings.Count(got, "\n") >= 2
	}) {
		t.Fatalf("handlers wrote %q, want a main and a child line (a flush signalled again dies before its echo)", got)
	}
	if !strings.Contains(got, "main\n") || !strings.Contains(got, "child\n") {
		t.Errorf("handlers wrote %q, want one main and one child line", got)
	}
	// Thawed again, in whichever hierarchy froze it.
	if d := g.h.v1Dir(cgroup1.Freezer, g.rel); d != "" {
		if state := readFile(t, filepath.Join(d, "freezer.state")); state != "THAWED" {
			t.Errorf("freezer.state %s after Signal, want THAWED", state)
		}
	}
	if d := g.h.unifiedDir(g.rel); d != "" {
		if b, err := os.ReadFile(filepath.Join(d, "cgroup.freeze")); err == nil && strings.TrimSpace(string(b)) != "0" {
			t.Errorf("cgroup.freeze %q after Signal, want 0", b)
		}
	}

	gone, err := h.New("jobs/gone", &specs.LinuxResources{})
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, err := gone.Signal(unix.SIGTERM); n != 0 || err != nil {
		t.Errorf("Signal of a deleted group = %d, %v; want 0, nil", n, err)
	}
}
