package guard

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
	"golang.org/x/sys/unix"
)

// spawnSleeper has the guard behind c start job name (a sleep) in its
// cgroup, made first, and returns Spawn's answer.
func spawnSleeper(w *world, c *Client, name string) (worker.Run, error) {
	if _, err := w.h.New("jobs/"+name, nil); err != nil {
		return worker.Run{}, err
	}
	r, wp, err := os.Pipe()
	if err != nil {
		return worker.Run{}, err
	}
	defer r.Close()
	defer wp.Close()
	return c.Spawn(&worker.Exec{Path: "/bin/sh", Argv: []string{"sh", "-c", "exec sleep 1000"}, Env: []string{"PATH=/usr/bin:/bin"}},
		worker.Run{JobID: name, Cgroup: "jobs/" + name, Fingerprint: "f-" + name}, wp, int(r.Fd()), func(unix.WaitStatus) {})
}

// released releases the guard behind c and waits for it (reaped) to exit.
func released(t *testing.T, c *Client, reaped <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(20*time.Second))
	defer cancel()
	if err := c.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	select {
	case <-reaped:
	case <-ctx.Done():
		t.Fatal("the released guard did not exit")
	}
}

// A guard that exits while a start waits for its answer (here SIGKILLed
// while stopped, the start sent to it) cut the start short: Spawn's error
// is ErrStartInterrupted, which the worker tries again on the next guard
// without counting it against the job, not a failure for good. The next
// start goes through a new guard.
func TestStartCutShortByTheGuardsExitIsRetried(t *testing.T) {
	w := newWorld(t)
	c, exited := w.connect()
	c.Deadline(time.Now().Add(time.Hour))
	w.acked(c)
	pid := c.PID()
	stopGuard(t, pid)
	errc := make(chan error, 1)
	go func() {
		_, err := spawnSleeper(w, c, "cut")
		errc <- err
	}()
	testutil.Eventually(t, 20*time.Second, "the start sent to the stopped guard", func() bool {
		c.runs.mu.Lock()
		defer c.runs.mu.Unlock()
		return c.runs.live != nil && len(c.runs.live.waiting) == 1
	})
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	var err error
	select {
	case err = <-errc:
	case <-time.After(testutil.Deadline(40 * time.Second)):
		t.Fatal("the start through the killed guard did not return")
	}
	if err == nil || !errors.Is(err, worker.ErrStartInterrupted) || !worker.TransientStart(err) {
		t.Fatalf("start through a guard that exited meanwhile: %v, want an interrupted start (tried again)", err)
	}
	startsAJob(t, w, c, "after-cut")
	if c.PID() == pid || c.PID() == 0 {
		t.Fatalf("the start went through guard %d, want a new one (the old was %d)", c.PID(), pid)
	}
	released(t, c, w.reaped(c.PID()))
}

// An agent resumed with its guard past the guard's deadline (the whole
// host stopped past the session TTL) does not start through that guard,
// which kills every job and exits once it runs again: Spawn waits, and
// while the guard stays so it returns ErrStartInterrupted without sending
// the start (tried again by the worker); once that guard is gone, the
// start goes through a new one.
func TestNoStartThroughAGuardPastItsDeadline(t *testing.T) {
	w := newWorld(t)
	c, exited := w.connect()
	deadline := time.Now().Add(time.Second)
	c.Deadline(deadline)
	w.acked(c)
	pid := c.PID()
	stopGuard(t, pid)
	resumed := false
	defer func() {
		if !resumed {
			_ = unix.Kill(pid, unix.SIGCONT)
		}
	}()
	testutil.Eventually(t, 20*time.Second, "the guard's deadline passed while it is stopped", func() bool {
		return time.Now().After(deadline)
	})
	_, err := spawnSleeper(w, c, "past")
	if err == nil || !errors.Is(err, worker.ErrStartInterrupted) {
		t.Fatalf("start through a guard past its deadline: %v, want an interrupted start (tried again)", err)
	}
	c.runs.mu.Lock()
	waiting := len(c.runs.live.waiting)
	c.runs.mu.Unlock()
	if waiting != 0 {
		t.Fatalf("%d messages wait for the guard past its deadline, want none sent", waiting)
	}
	if err := unix.Kill(pid, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	select {
	case <-exited:
	case <-time.After(testutil.Deadline(30 * time.Second)):
		t.Fatal("the guard resumed past its deadline did not exit")
	}
	c.Deadline(time.Now().Add(time.Hour))
	startsAJob(t, w, c, "after-past")
	if c.PID() == pid || c.PID() == 0 {
		t.Fatalf("the start went through guard %d, want a new one (the old was %d)", c.PID(), pid)
	}
	released(t, c, w.reaped(c.PID()))
}
