package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

// setPidsMax writes v to pids.max of g in whichever hierarchy has the
// pids controller (v1 pids on a hybrid host, the unified one on pure v2).
func setPidsMax(t *testing.T, g *testGroup, v string) {
	t.Helper()
	for _, dir := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		f := filepath.Join(dir, g.name, "pids.max")
		if _, err := os.Stat(f); err != nil {
			continue
		}
		if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
			t.Fatalf("write %s to %s: %v", v, f, err)
		}
		return
	}
	t.Skip("no pids controller for the job's cgroup")
}

// A start that fails for a reason that passes (here the kernel refuses
// the fork: the job's cgroup is at its pids.max, EAGAIN) leaves the job
// backing off with the reason, not failed, and never said started; the
// launcher thread is back home; the agent's log says so (LogTransitions);
// the backoff is noted for a later agent at every retry (BackoffNotes);
// and the job starts once the reason is gone, though its restart policy is
// "never", with no retry counted as a restart.
func TestTransientStartFailureIsRetried(t *testing.T) {
	rt := ownRuntime(t)
	notes := &notesRec{jobs: map[string]Pending{}}
	g := newTestGroup(t, 0)
	setPidsMax(t, g, "0")
	var logs, agentLog testutil.SyncBuffer
	spec := sh(g, "sleep 1000")
	spec.Runtime = rt
	spec.Notes = notes
	spec.Log = &logs
	spec.OnChange = LogTransitions(slog.New(slog.NewTextHandler(&agentLog, nil)), "job", func() bool { return false })
	spec.Backoff = Backoff{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}
	w := startWorker(t, spec)
	testutil.Eventually(t, 15*time.Second, "a second retry, noted", func() bool {
		st := w.Status()
		_, noted := notes.get("job")
		return st.State == BackingOff && noted && strings.Count(logs.String(), "start failed") >= 3
	})
	st := w.Status()
	if !strings.Contains(st.Reason, unix.EAGAIN.Error()) || !strings.Contains(st.Reason, "pids.max of the job's cgroup") || st.LastExit != nil {
		t.Errorf("status %+v, want backoff with the kernel's reason and no exit", st)
	}
	if !strings.Contains(agentLog.String(), "job failed to start for a reason that passes; trying again") {
		t.Errorf("agent log:\n%s", agentLog.String())
	}
	if strings.Contains(logs.String(), "berth: started") {
		t.Errorf("log says started:\n%s", logs.String())
	}
	checkThreadsHome(t)
	setPidsMax(t, g, "max")
	pid := waitRunning(t, w)
	if st := w.Status(); st.Reason != "" || st.PID != pid || st.Restarts != 0 {
		t.Errorf("running with %+v, want no reason and no restart counted", st)
	}
	testutil.Eventually(t, 10*time.Second, "the note dropped once running", func() bool {
		_, noted := notes.get("job")
		return !noted
	})
}

// Starts that keep failing for a reason that passes end, after
// maxStartRetries tries, Failed with the reason and the count.
func TestTransientStartRetriesEnd(t *testing.T) {
	g := newTestGroup(t, 0)
	setPidsMax(t, g, "0")
	spec := sh(g, "sleep 1000")
	spec.Backoff = Backoff{Initial: time.Millisecond, Max: time.Millisecond}
	w := startWorker(t, spec)
	select {
	case <-w.Done():
	case <-time.After(testutil.Deadline(30 * time.Second)):
		t.Fatalf("worker did not end: %+v", w.Status())
	}
	st := w.Status()
	if st.State != Failed || !strings.Contains(st.Reason, fmt.Sprintf("after %d tries", maxStartRetries+1)) || st.Restarts != 0 {
		t.Errorf("status %+v, want failed after %d tries, no restart counted", st, maxStartRetries+1)
	}
}

// TransientStart takes the kernel's shortages and ErrStartTransient, and
// nothing a definition gets wrong.
func TestTransientStartClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("open tasks: %w", &os.PathError{Op: "open", Path: "tasks", Err: unix.EMFILE}), true},
		{fmt.Errorf("fork: %w", unix.EAGAIN), true},
		{unix.ENFILE, true},
		{unix.ENOMEM, true},
		{TransientStartError("process 7 died before exec: killed by SIGKILL"), true},
		{fmt.Errorf("x: %w", TransientStartError("y")), true},
		{&os.PathError{Op: "exec", Path: "/bin/nope", Err: unix.ENOENT}, false},
		{unix.EACCES, false},
		{errors.New("user nobody2: unknown user"), false},
	} {
		if got := TransientStart(c.err); got != c.want {
			t.Errorf("TransientStart(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// interruptingSpawner cuts short its first cuts starts, as a lease guard
// that exits mid-start does (ErrStartInterrupted), then starts runs on its
// Runtime's launcher threads.
type interruptingSpawner struct {
	rt    *Runtime
	g     Group
	cuts  int32
	calls atomic.Int32
}

func (s *interruptingSpawner) Spawn(x *Exec, r Run, logw *os.File, _ int, onExit func(unix.WaitStatus)) (Run, error) {
	if s.calls.Add(1) <= s.cuts {
		return Run{}, InterruptedStartError("start through the lease guard: the guard exited during the start")
	}
	pid, err := s.rt.Launch(x, s.g, logw, onExit)
	r.PID = pid
	return r, err
}

func (s *interruptingSpawner) Adopt(Run, func(unix.WaitStatus)) {}
func (s *interruptingSpawner) Forget(Run)                       {}

// A start cut short by the loss of the lease guard is tried again with
// the backoff, however many times in a row (more than maxStartRetries
// here): it is not the job's failure, and the job runs once a start goes
// through, never failed.
func TestInterruptedStartIsNotCountedAgainstTheJob(t *testing.T) {
	rt := ownRuntime(t)
	g := newTestGroup(t, 0)
	spec := sh(g, "sleep 1000")
	spec.Runtime = rt
	sp := &interruptingSpawner{rt: rt, g: g, cuts: maxStartRetries + 2}
	spec.Spawner = sp
	spec.Backoff = Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}
	var failed atomic.Bool
	spec.OnChange = func(st Status) {
		if st.State == Failed {
			failed.Store(true)
		}
	}
	w := startWorker(t, spec)
	waitRunning(t, w)
	if n := sp.calls.Load(); n != sp.cuts+1 {
		t.Errorf("%d starts, want %d", n, sp.cuts+1)
	}
	if failed.Load() {
		t.Errorf("the job was failed on its way to running")
	}
}

// cgroupGoneSpawner fails its first start as a launcher does whose job
// cgroup was removed meanwhile, then starts runs on its Runtime's
// launcher threads.
type cgroupGoneSpawner struct {
	rt    *Runtime
	g     Group
	calls atomic.Int32
}

func (s *cgroupGoneSpawner) Spawn(x *Exec, r Run, logw *os.File, _ int, onExit func(unix.WaitStatus)) (Run, error) {
	if s.calls.Add(1) == 1 {
		return Run{}, errors.New("load cgroup jobs/job: cgroup does not exist")
	}
	pid, err := s.rt.Launch(x, s.g, logw, onExit)
	r.PID = pid
	return r, err
}

func (s *cgroupGoneSpawner) Adopt(Run, func(unix.WaitStatus)) {}
func (s *cgroupGoneSpawner) Forget(Run)                       {}

// A start that fails while the job's cgroup is gone (removed during the
// start: a lease guard past its deadline removes every job's cgroup as it
// exits) has the cgroup made again (Spec.Remake) and is tried again,
// rather than leaving the job failed for good; a start that fails with
// the cgroup whole is not.
func TestStartWhoseCgroupWasRemovedIsRetried(t *testing.T) {
	rt := ownRuntime(t)
	g := newTestGroup(t, 0)
	spec := sh(g, "sleep 1000")
	spec.Runtime = rt
	sp := &cgroupGoneSpawner{rt: rt, g: g}
	spec.Spawner = sp
	spec.Backoff = Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}
	var remakes atomic.Int32
	spec.Remake = func() ([]string, error) {
		if remakes.Add(1) == 1 {
			return []string{"jobs/job"}, nil // it was gone, and is made again
		}
		return nil, nil
	}
	w := startWorker(t, spec)
	waitRunning(t, w)
	if n := sp.calls.Load(); n != 2 {
		t.Errorf("%d starts, want 2", n)
	}

	g2 := newTestGroup(t, 0)
	spec2 := sh(g2, "sleep 1000")
	spec2.Runtime = rt
	spec2.Spawner = &cgroupGoneSpawner{rt: rt, g: g2}
	spec2.Remake = func() ([]string, error) { return nil, nil } // whole: a real failure
	w2 := startWorker(t, spec2)
	testutil.Eventually(t, 20*time.Second, "the start with its cgroup whole failed", func() bool {
		return w2.Status().State == Failed
	})
}
