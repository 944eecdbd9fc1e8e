package guard

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
	"golang.org/x/sys/unix"
)

// exitCh is an onExit that hands the status on.
func exitCh() (chan unix.WaitStatus, func(unix.WaitStatus)) {
	ch := make(chan unix.WaitStatus, 1)
	return ch, func(ws unix.WaitStatus) { ch <- ws }
}

// The guard starts a run for an agent and stays its parent: a second
// client (a restarted agent) lists the run with its pid, start time and
// cgroup leaf (Verify holds), reads on from its log pipe, and gets its
// exit; an exit that comes while no client is connected is kept and
// listed with its status.
func TestGuardHoldsRunsAcrossAgents(t *testing.T) {
	w := newWorld(t)
	c1, _ := w.connect()
	c1.Deadline(time.Now().Add(time.Minute))
	w.acked(c1)

	spawn := func(c *Client, job, script string) (worker.Run, *os.File, chan unix.WaitStatus) {
		t.Helper()
		if _, err := w.h.New("jobs/"+job, nil); err != nil {
			t.Fatal(err)
		}
		r, wp, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer wp.Close()
		ch, onExit := exitCh()
		rfd := int(r.Fd())
		run, err := c.Spawn(&worker.Exec{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}},
			worker.Run{JobID: job, Cgroup: "jobs/" + job, Fingerprint: "f-" + job, Restarts: 2}, wp, rfd, onExit)
		if err != nil {
			t.Fatalf("spawn %s: %v", job, err)
		}
		if run.ID == "" || run.PID <= 0 || run.StartTicks == 0 {
			t.Fatalf("spawned run %+v: want an ID, a pid and a start time", run)
		}
		return run, r, ch
	}
	a, ar, _ := spawn(c1, "a", "echo first; read x < /proc/self/fd/0; exec sleep 1000")
	b, br, _ := spawn(c1, "b", "exec sleep 1000")
	ar.Close()
	br.Close()
	// The agent goes (a crash: no release).
	c1.Close()

	// A job exits while no agent is connected.
	if err := unix.Kill(b.PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The next agent's list shows b's exit once the guard has reaped it
	// (b dead is not yet b reaped and recorded: awaited, not assumed).
	c2, _ := w.connect()
	var held []HeldRun
	testutil.Eventually(t, 20*time.Second, "the guard's list records b's exit", func() bool {
		for _, h := range held {
			h.Logr.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var err error
		if held, err = c2.Held(ctx); err != nil {
			t.Logf("list: %v", err)
			return false
		}
		for _, h := range held {
			if h.JobID == "b" {
				return h.Exited
			}
		}
		return false
	})
	byJob := map[string]HeldRun{}
	for _, h := range held {
		byJob[h.JobID] = h
		defer h.Logr.Close()
	}
	ha, hb := byJob["a"], byJob["b"]
	if len(held) != 2 || ha.ID != a.ID || hb.ID != b.ID {
		t.Fatalf("held %+v, want runs %s and %s", held, a.ID, b.ID)
	}
	if ha.PID != a.PID || ha.StartTicks != a.StartTicks || ha.Restarts != 2 || ha.Fingerprint != "f-a" || ha.Exited {
		t.Errorf("held a = %+v, spawned %+v", ha.Run, a)
	}
	if err := ha.Verify(); err != nil {
		t.Errorf("verify a: %v", err)
	}
	if !hb.Exited || !hb.Status.Signaled() || hb.Status.Signal() != unix.SIGKILL {
		t.Errorf("held b = exited %v status %v, want killed by SIGKILL", hb.Exited, hb.Status)
	}
	// The log pipe is the run's: what it wrote before is there.
	line, err := bufio.NewReader(ha.Logr).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "first" {
		t.Errorf("read a's log pipe: %q, %v", line, err)
	}
	// b's exit is delivered on adoption, a's when it comes.
	chb, onb := exitCh()
	c2.Adopt(hb.Run, onb)
	select {
	case ws := <-chb:
		if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
			t.Errorf("b's status %v, want SIGKILL", ws)
		}
	case <-time.After(testutil.Deadline(10 * time.Second)):
		t.Error("b's exit was not delivered on adoption")
	}
	cha, ona := exitCh()
	c2.Adopt(ha.Run, ona)
	if err := unix.Kill(a.PID, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case ws := <-cha:
		if !ws.Signaled() || ws.Signal() != unix.SIGTERM {
			t.Errorf("a's status %v, want SIGTERM", ws)
		}
	case <-time.After(testutil.Deadline(20 * time.Second)):
		t.Fatal("a's exit was not delivered")
	}
	// Forgotten once handled (a worker forgets a run when its exit step
	// is done): nothing is held any more.
	c2.Forget(ha.Run)
	c2.Forget(hb.Run)
	testutil.Eventually(t, 10*time.Second, "the guard holds no run", func() bool {
		c3, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err := c2.Held(c3)
		for _, r := range h {
			r.Logr.Close()
		}
		return err == nil && len(h) == 0
	})
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	if err := c2.Release(rctx); err != nil {
		t.Fatal(err)
	}
}

// A spawn the launcher refuses comes back as the start's error; Verify
// refuses a record whose start time is not the process's.
func TestGuardSpawnErrorAndVerify(t *testing.T) {
	w := newWorld(t)
	c, _ := w.connect()
	if _, err := w.h.New("jobs/x", nil); err != nil {
		t.Fatal(err)
	}
	r, wp, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer wp.Close()
	_, err = c.Spawn(&worker.Exec{Path: "/nonexistent/prog", Argv: []string{"prog"}}, worker.Run{JobID: "x", Cgroup: "jobs/x"}, wp, int(r.Fd()), func(unix.WaitStatus) {})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/prog") || worker.TransientStart(err) {
		t.Errorf("spawn of a missing program: %v, want an error naming it, not one that passes", err)
	}
	// A fork the kernel refuses for a shortage (the job's cgroup at
	// pids.max 0: EAGAIN) comes back as one that passes, so the worker
	// tries it again.
	t.Run("shortage passes", func(t *testing.T) {
		pidsMax := ""
		for _, dir := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
			f := filepath.Join(dir, w.root, "jobs/x/pids.max")
			if _, err := os.Stat(f); err == nil {
				pidsMax = f
				break
			}
		}
		if pidsMax == "" {
			t.Skip("no pids controller for the job's cgroup")
		}
		if err := os.WriteFile(pidsMax, []byte("0"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := c.Spawn(&worker.Exec{Path: "/bin/sleep", Argv: []string{"sleep", "1000"}}, worker.Run{JobID: "x", Cgroup: "jobs/x"}, wp, int(r.Fd()), func(unix.WaitStatus) {})
		if err == nil || !worker.TransientStart(err) {
			t.Errorf("spawn into a cgroup at pids.max 0: %v, want an error that passes", err)
		}
	})
	h := HeldRun{Run: worker.Run{ID: "r", PID: os.Getpid(), StartTicks: 1}}
	if err := h.Verify(); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Errorf("verify with a wrong start time: %v", err)
	}
	rctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Release(rctx); err != nil {
		t.Fatal(err)
	}
}

// A run whose guard dies after the run was listed but before the agent
// waits for it is reported lost (SIGKILL) to the wait that comes later,
// never left waiting; a spawn whose argv and environment exceed one
// packet travels in a memfd and runs.
func TestLateWaitAfterGuardLossAndLargeSpawn(t *testing.T) {
	w := newWorld(t)
	c1, _ := w.connect()
	c1.Deadline(time.Now().Add(time.Minute))
	w.acked(c1)
	if _, err := w.h.New("jobs/big", nil); err != nil {
		t.Fatal(err)
	}
	r, wp, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// 200 KiB in four variables (one string may hold at most 128 KiB:
	// execve(2), MAX_ARG_STRLEN).
	env := []string{"PATH=/usr/bin:/bin"}
	for _, k := range []string{"B1", "B2", "B3", "B4"} {
		env = append(env, k+"="+strings.Repeat("x", 50<<10))
	}
	run, err := c1.Spawn(&worker.Exec{Path: "/bin/sh", Argv: []string{"sh", "-c", `echo $(( ${#B1} + ${#B2} + ${#B3} + ${#B4} )); exec sleep 1000`}, Env: env},
		worker.Run{JobID: "big", Cgroup: "jobs/big"}, wp, int(r.Fd()), func(unix.WaitStatus) {})
	wp.Close()
	if err != nil {
		t.Fatalf("spawn with a 200 KiB environment: %v", err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != fmt.Sprint(200<<10) {
		t.Errorf("the job saw %q bytes of its environment (%v), want %d", strings.TrimSpace(line), err, 200<<10)
	}
	c1.Close()

	c2, _ := w.connect()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held, err := c2.Held(ctx)
	if err != nil || len(held) != 1 || held[0].ID != run.ID {
		t.Fatalf("held %+v, %v: want run %s", held, err, run.ID)
	}
	held[0].Logr.Close()
	gpid := c2.PID()
	if err := unix.Kill(gpid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the runs connection ends", func() bool {
		c2.runs.mu.Lock()
		defer c2.runs.mu.Unlock()
		return c2.runs.live == nil
	})
	ch, onExit := exitCh()
	c2.Adopt(held[0].Run, onExit)
	select {
	case ws := <-ch:
		if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
			t.Errorf("status %v, want SIGKILL (lost with its guard)", ws)
		}
	case <-time.After(testutil.Deadline(10 * time.Second)):
		t.Fatal("a wait after the guard's loss was never answered")
	}
	testutil.Eventually(t, 20*time.Second, "the run dies with its guard", func() bool { return !testutil.Alive(run.PID) })
}

// breakConn shuts the client's connection down under it, as a
// transport error would (shutdown(2) on its socket: both ends see the
// connection end; the guard lives on).
func breakConn(t *testing.T, c *Client) {
	t.Helper()
	c.runs.mu.Lock()
	l := c.runs.live
	c.runs.mu.Unlock()
	if l == nil {
		t.Fatal("no connection to break")
	}
	sc, err := l.mc.c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_RDWR) }); err != nil || serr != nil {
		t.Fatalf("shutdown the connection: %v %v", err, serr)
	}
}

// A connection that breaks while its guard lives costs no run: the
// client connects again and lists the runs; a run that runs on is waited
// for on the new connection (its later exit comes with its status), and a
// run that exited while no connection was up has its real status
// delivered, not the SIGKILL of a lost run.
func TestBrokenRunsConnectionRelists(t *testing.T) {
	w := newWorld(t)
	c, _ := w.connect()
	c.Deadline(time.Now().Add(time.Minute))
	w.acked(c)
	groups := map[string]*cgroup.Group{}
	spawn := func(job, script string) (worker.Run, chan unix.WaitStatus) {
		t.Helper()
		g, err := w.h.New("jobs/"+job, nil)
		if err != nil {
			t.Fatal(err)
		}
		groups[job] = g
		r, wp, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer wp.Close()
		t.Cleanup(func() { r.Close() })
		ch, onExit := exitCh()
		run, err := c.Spawn(&worker.Exec{Path: "/bin/sh", Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}},
			worker.Run{JobID: job, Cgroup: "jobs/" + job, Fingerprint: "f-" + job}, wp, int(r.Fd()), onExit)
		if err != nil {
			t.Fatalf("spawn %s: %v", job, err)
		}
		return run, ch
	}
	a, cha := spawn("a", "exec sleep 1000")
	b, chb := spawn("b", `trap "exit 7" TERM; sleep 1000 & wait`)
	testutil.Eventually(t, 20*time.Second, "b's shell has its sleep", func() bool {
		return len(w.pids(&job{rel: "jobs/b", g: groups["b"]})) == 2
	})

	// b exits in the gap: after the connection ended, before the client
	// connects again; the guard reaps it with no agent to tell.
	inGap, proceed := make(chan struct{}), make(chan struct{})
	c.runs.beforeRelist = func() {
		close(inGap)
		<-proceed
	}
	gpid := c.PID()
	breakConn(t, c)
	select {
	case <-inGap:
	case <-time.After(testutil.Deadline(20 * time.Second)):
		t.Fatal("the broken connection was not noticed")
	}
	if err := unix.Kill(b.PID, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the guard reaps b", func() bool { return unix.Kill(b.PID, 0) == unix.ESRCH })
	close(proceed)
	select {
	case ws := <-chb:
		if !ws.Exited() || ws.ExitStatus() != 7 {
			t.Errorf("b's status %v, want exit 7 (the real status, not a lost run's SIGKILL)", ws)
		}
	case <-time.After(testutil.Deadline(20 * time.Second)):
		t.Fatal("b's exit during the gap was never delivered")
	}
	select {
	case ws := <-cha:
		t.Fatalf("a reported ended (%v) by the broken connection", ws)
	default:
	}
	if !testutil.Alive(a.PID) || c.PID() != gpid {
		t.Fatalf("a (pid %d) alive %v, guard pid %d then %d: want the same run under the same guard", a.PID, testutil.Alive(a.PID), gpid, c.PID())
	}
	c.Forget(b)
	// a is waited for on the new connection.
	if err := unix.Kill(a.PID, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case ws := <-cha:
		if !ws.Signaled() || ws.Signal() != unix.SIGTERM {
			t.Errorf("a's status %v, want SIGTERM", ws)
		}
	case <-time.After(testutil.Deadline(20 * time.Second)):
		t.Fatal("a's exit after the reconnection was never delivered")
	}
	c.Forget(a)
	testutil.Eventually(t, 10*time.Second, "the guard holds no run", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h, err := c.Held(ctx)
		for _, r := range h {
			r.Logr.Close()
		}
		return err == nil && len(h) == 0
	})
	// The deadlines go over the new connection too.
	rctx, rcancel := context.WithTimeout(context.Background(), testutil.Deadline(20*time.Second))
	defer rcancel()
	if err := c.DeadlineSync(rctx, time.Now().Add(2*time.Minute)); err != nil {
		t.Fatalf("a deadline after the reconnection: %v", err)
	}
	if err := c.Release(rctx); err != nil {
		t.Fatal(err)
	}
}
