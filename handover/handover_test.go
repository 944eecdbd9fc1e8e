package handover

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/guard"
	"github.com/berthd/berth/internal/kernfile"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/worker"
)

// heldList is a Guard whose runs are a given list (of real processes of
// the test's): what Load makes of the list the real guard answers, which
// the guard's own tests and the end-to-end tests check.
type heldList struct {
	held []guard.HeldRun
	err  error
	pid  int

	mu        sync.Mutex
	forgotten []string
}

func (g *heldList) Held(context.Context) ([]guard.HeldRun, error) { return g.held, g.err }
func (g *heldList) PID() int                                      { return g.pid }
func (g *heldList) Forget(r worker.Run) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forgotten = append(g.forgotten, r.ID)
}

// sleeper starts a process that sleeps until the test ends and returns
// its pid and start time.
func sleeper(t *testing.T) (int, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	st, err := kernfile.ReadProcStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, st.StartTicks
}

// held is a run the guard holds of job, whose log pipe's read end is
// returned too (to see that Load closes the ones it does not keep).
func held(t *testing.T, id, job string, pid int, ticks uint64, at time.Time, exited bool) guard.HeldRun {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	t.Cleanup(func() { _ = r.Close() })
	return guard.HeldRun{Run: worker.Run{ID: id, JobID: job, Cgroup: "jobs/" + job, PID: pid, StartTicks: ticks, StartedAt: at, Fingerprint: "f-" + job},
		Exited: exited, Logr: r}
}

// closed reports whether f was closed.
func closed(f *os.File) bool {
	_, err := f.Stat()
	return errors.Is(err, os.ErrClosed)
}

// Load keeps one run per job, the newest that runs over one that exited,
// kills and forgets the others; forgets a run that fails its identity
// check; names the kept runs' cgroups; and reads the restart waits
// written beside the same guard and the saved session.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t0 := time.Now().Add(-time.Hour)
	oldA, oldTicks := sleeper(t)
	newA, newTicks := sleeper(t)
	b, _ := sleeper(t)
	d, dTicks := sleeper(t)
	g := &heldList{pid: os.Getpid(), held: []guard.HeldRun{
		held(t, "a1", "a", oldA, oldTicks, t0, false),
		held(t, "a2", "a", newA, newTicks, t0.Add(time.Minute), false),
		held(t, "b1", "b", b, 1, t0, false), // not the process's start time: another process
		held(t, "c1", "c", 0, 0, t0, true),  // exited while no agent ran: adopted, its exit handled
		held(t, "d1", "d", d, dTicks, t0, false),
		held(t, "d2", "d", 0, 0, t0.Add(time.Minute), true), // newer, but exited: the running one wins
	}}

	// What the earlier agent saved beside this guard (the test process
	// stands for it: its start time is known).
	n, _ := loadNotes(dir, g.PID, log)
	n.Waiting(worker.Pending{JobID: "w", Fingerprint: "f-w", Restarts: 2, Delay: time.Second, NextRestart: time.Now().Add(time.Hour)})
	n.Close(false)
	if err := NewSessionFile(dir).Save(source.SavedSession{Member: "host-a", Lease: 42}); err != nil {
		t.Fatal(err)
	}

	in := Load(context.Background(), Options{DataDir: dir, Guard: g, Log: log})
	defer in.Notes.Close(true)
	runs := slices.Sorted(func(yield func(string) bool) {
		for job, r := range in.Jobs.Runs {
			if !yield(job + ":" + r.Run.ID) {
				return
			}
		}
	})
	if want := []string{"a:a2", "c:c1", "d:d1"}; !slices.Equal(runs, want) {
		t.Errorf("runs %v, want %v", runs, want)
	}
	if want := map[string]bool{"jobs/a": true, "jobs/c": true, "jobs/d": true}; !maps.Equal(in.Keep, want) {
		t.Errorf("keep %v, want %v", in.Keep, want)
	}
	slices.Sort(g.forgotten)
	if want := []string{"a1", "b1", "d2"}; !slices.Equal(g.forgotten, want) {
		t.Errorf("forgotten %v, want %v", g.forgotten, want)
	}
	testutil.Eventually(t, 10*time.Second, "the second run of a killed", func() bool { return !testutil.Alive(oldA) })
	if !testutil.Alive(newA) || !testutil.Alive(d) {
		t.Error("a kept run was killed")
	}
	// A run failing its check is killed with the leftovers (its cgroup is
	// not kept), not by Load: the pid may be another process's.
	if !testutil.Alive(b) {
		t.Error("the process of a run that failed its identity check was signalled")
	}
	for _, h := range g.held {
		if kept := in.Jobs.Runs[h.JobID].Run.ID == h.ID; kept == closed(h.Logr) {
			t.Errorf("run %s: kept %v, log pipe closed %v", h.ID, kept, closed(h.Logr))
		}
	}
	if in.Held != 6 {
		t.Errorf("held %d, want 6", in.Held)
	}
	if w, ok := in.Jobs.Waits["w"]; !ok || w.Restarts != 2 || len(in.Jobs.Waits) != 1 {
		t.Errorf("waits %+v, want w's", in.Jobs.Waits)
	}
	if in.Session != (source.SavedSession{Member: "host-a", Lease: 42}) {
		t.Errorf("session %+v", in.Session)
	}
}

// A guard that cannot list its runs leaves nothing to adopt; no guard
// leaves no run or wait to inherit, and no notes, but the session.
func TestLoadWithoutRuns(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	in := Load(context.Background(), Options{DataDir: dir, Guard: &heldList{err: errors.New("another protocol"), pid: os.Getpid()}, Log: log})
	if !in.Jobs.Empty() || len(in.Keep) != 0 || in.Held != 0 {
		t.Errorf("inherited %+v from a guard that cannot list", in)
	}
	in.Notes.Close(false)
	if err := NewSessionFile(dir).Save(source.SavedSession{Member: "m", Lease: 7}); err != nil {
		t.Fatal(err)
	}
	in = Load(context.Background(), Options{DataDir: dir, Log: log})
	if !in.Jobs.Empty() || in.Notes != nil || in.Session.Lease != 7 {
		t.Errorf("inherited %+v without a guard, want only the session", in)
	}
}

// A run whose process is the run's (its start time) but lives outside
// the run's cgroup leaf is not adopted: Load kills it by its pid, since
// no clean-up of the agent's cgroups reaches it (C31's class), and
// forgets it.
func TestLoadKillsRunOutsideItsCgroup(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pid, ticks := sleeper(t)
	h := held(t, "e1", "e", pid, ticks, time.Now(), false)
	h.Leaf = "/sys/fs/cgroup/unified/berth-elsewhere/jobs/e/run-1"
	g := &heldList{pid: os.Getpid(), held: []guard.HeldRun{h}}
	in := Load(context.Background(), Options{DataDir: t.TempDir(), Guard: g, Log: log})
	defer in.Notes.Close(true)
	if len(in.Jobs.Runs) != 0 || len(in.Keep) != 0 {
		t.Errorf("runs %v, keep %v: a run outside its cgroup adopted", in.Jobs.Runs, in.Keep)
	}
	if !slices.Equal(g.forgotten, []string{"e1"}) {
		t.Errorf("forgotten %v, want [e1]", g.forgotten)
	}
	testutil.Eventually(t, 10*time.Second, "the run outside its cgroup killed", func() bool { return !testutil.Alive(pid) })
}
