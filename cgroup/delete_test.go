package cgroup

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Delete removes the group and its children from every hierarchy (not only
// the first controller, as libcgroup's cgdelete did), and
// deleting a missing group is not an error.
func TestDeleteEveryHierarchy(t *testing.T) {
	h := testHierarchy(t)
	if _, err := h.New("groups/del", &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: ptr(int64(10))}}); err != nil {
		t.Fatal(err)
	}
	g, err := h.New("groups/del/a", &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: ptr(int64(5))}})
	if err != nil {
		t.Fatal(err)
	}
	parent, err := h.Load("groups/del")
	if err != nil {
		t.Fatal(err)
	}
	dirs := append(h.dirs("groups/del"), h.dirs("groups/del/a")...)
	if len(dirs) < 2 {
		t.Fatalf("group exists in %v only", dirs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(5*time.Second))
	defer cancel()
	goroutines := runtime.NumGoroutine()
	if err := parent.Delete(ctx); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s survived Delete (%v)", d, err)
		}
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("Delete left %d goroutines running", n-goroutines)
	}
	if err := g.Delete(ctx); err != nil {
		t.Errorf("Delete of a missing group = %v, want nil", err)
	}
	if _, err := h.Load("groups/del/a"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Load of a deleted group = %v, want ErrNotExist", err)
	}
}

// A group left behind in only some hierarchies (a partial delete) is found
// by Children, loads, and Delete finishes it.
func TestDeletePartialLeftover(t *testing.T) {
	needV1(t)
	h := testHierarchy(t)
	if _, err := h.New("jobs/partial", nil); err != nil {
		t.Fatal(err)
	}
	// Remove it from the first controller only, as cgdelete did.
	first := h.dirs("jobs/partial")[0]
	if err := os.Remove(first); err != nil {
		t.Fatal(err)
	}
	names, err := h.Children(JobsDir)
	if err != nil || len(names) != 1 || names[0] != "partial" {
		t.Fatalf("Children = %v, %v", names, err)
	}
	g, err := h.Load("jobs/partial")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(5*time.Second))
	defer cancel()
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range h.dirs("jobs/partial") {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s survived", d)
		}
	}
}

// Delete of a busy group retries until ctx ends, then names what is left,
// and returns (no retry loop keeps running).
func TestDeleteBusyGroupTimesOut(t *testing.T) {
	h := testHierarchy(t)
	g, err := h.New("jobs/busy", nil)
	if err != nil {
		t.Fatal(err)
	}
	startIn(t, g, "exec sleep 1000") // one process: sh -c may fork a last command
	if !testutil.Poll(5*time.Second, func() bool { p, _ := g.Pids(); return len(p) == 1 }) {
		t.Fatal("sleep not in group")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = g.Delete(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Delete of a busy group = %v, want deadline exceeded", err)
	}
	for _, d := range h.dirs("jobs/busy") {
		if _, serr := os.Stat(d); serr != nil {
			t.Errorf("busy group's directory %s vanished: %v", d, serr)
		}
	}
}

// Cleanup kills and removes every leftover below jobs and groups, a
// group's jobs included (the agent's start-up sweep; docs/cases.md C1).
func TestCleanupKillsLeftovers(t *testing.T) {
	h := testHierarchy(t)
	a, err := h.New("jobs/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.New("groups/x", nil); err != nil {
		t.Fatal(err)
	}
	b, err := h.New("groups/x/b", nil)
	if err != nil {
		t.Fatal(err)
	}
	ja := startIn(t, a, "setsid sleep 1000 & exec sleep 1000")
	jb := startIn(t, b, "exec sleep 1000")
	if !testutil.Poll(5*time.Second, func() bool {
		pa, _ := a.Pids()
		pb, _ := b.Pids()
		return len(pa) >= 2 && len(pb) >= 1
	}) {
		pa, _ := a.Pids()
		pb, _ := b.Pids()
		t.Fatalf("workloads not running: a %v, b %v", pa, pb)
	}
	// A second agent start sees the same tree through a fresh Hierarchy.
	h2, err := Open(h.Root())
	if err != nil {
		t.Fatal(err)
	}
	var logged testutil.SyncBuffer
	h2.SetLogger(slog.New(slog.NewJSONHandler(&logged, nil)))
	pidsA, _ := a.Pids()
	pidsB, _ := b.Pids()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	for _, sub := range Subtrees() {
		if err := h2.Cleanup(ctx, sub); err != nil {
			t.Fatalf("Cleanup %s: %v", sub, err)
		}
	}
	ja.wait(t, 5*time.Second)
	jb.wait(t, 5*time.Second)
	// One WARN line per leftover cgroup, with what was killed there.
	type line struct {
		Level  string
		Msg    string
		Cgroup string
		Killed int
		Pids   []int
	}
	got := map[string]line{}
	for _, raw := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
		var l line
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("log line %q: %v", raw, err)
		}
		got[l.Cgroup] = l
	}
	for rel, pids := range map[string][]int{"jobs/a": pidsA, "groups/x": pidsB} {
		l, ok := got[path.Join(h.Root(), rel)]
		if !ok || l.Level != "WARN" || l.Killed != len(pids) || !slices.Equal(l.Pids, pids) {
			t.Errorf("log for %s = %+v, want WARN killed=%d pids=%v; log:\n%s", rel, l, len(pids), pids, logged.String())
		}
	}
	if len(got) != 2 {
		t.Errorf("Cleanup logged %d cgroups, want 2:\n%s", len(got), logged.String())
	}
	for _, sub := range Subtrees() {
		if names, err := h2.Children(sub); err != nil || len(names) != 0 {
			t.Errorf("Children of %s after Cleanup = %v, %v", sub, names, err)
		}
		for _, d := range h.dirs(sub) {
			if _, err := os.Stat(d); err != nil {
				t.Errorf("Cleanup removed %s itself: %v", sub, err)
			}
		}
	}
}
