package guard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
	"golang.org/x/sys/unix"
)

// guardEnv, set in a re-executed test binary's environment, makes it run
// as the guard (Options.Command) instead of the tests.
const guardEnv = "BERTH_GUARD_TEST_PROCESS"

func TestMain(m *testing.M) {
	if os.Getenv(guardEnv) == "1" {
		os.Exit(runAsGuard(os.Args[1:]))
	}
	os.Exit(testutil.CheckLeftBehind(m.Run()))
}

// runAsGuard is `berth guard` in the test binary: the real Serve, the
// real socket, the real cgroups.
func runAsGuard(args []string) int {
	fs := flag.NewFlagSet("guard", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "")
	root := fs.String("cgroup-root", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	err := Serve(context.Background(), ServeOptions{DataDir: *dataDir, CgroupRoot: *root, Log: log, Ready: NotifyReady})
	if err != nil && !errors.Is(err, ErrRunning) {
		log.Error("guard", "error", err)
		return 1
	}
	return 0
}

// world is one test's agent side: a prepared cgroup root, a data_dir and
// the guard's pid once started.
type world struct {
	t       *testing.T
	root    string
	dataDir string
	h       *cgroup.Hierarchy
}

func newWorld(t *testing.T) *world {
	testutil.NeedRoot(t)
	if cgroup.DetectMode() == cgroup.Unavailable {
		t.Skip("no cgroup file system mounted")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	w := &world{t: t, dataDir: t.TempDir(),
		root: testutil.TrackCgroupRoot(t, "berth-test-guard-"+hex.EncodeToString(b))}
	h, err := cgroup.Open(w.root)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Prepare(); err != nil {
		t.Fatal(err)
	}
	w.h = h
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(w.dataDir, logName)); err == nil {
				t.Logf("guard log:\n%s", b)
			}
		}
	})
	return w
}

// options are the client options of this world: the test binary is the
// guard.
func (w *world) options() Options {
	return Options{DataDir: w.dataDir, CgroupRoot: w.root, Command: []string{os.Args[0]},
		Env: append(os.Environ(), guardEnv+"=1")}
}

// connect starts (or connects to) the guard and returns the client and a
// channel closed once the guard process has exited and been reaped.
func (w *world) connect() (*Client, <-chan struct{}) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Start(ctx, w.options())
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(c.Close)
	return c, w.reaped(c.PID())
}

// reaped waits for pid, this test process's child (the guard it
// started), in a goroutine, and returns a channel closed when it is
// reaped. A guard still running at the end of the test is killed first.
func (w *world) reaped(pid int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
	w.t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = unix.Kill(pid, unix.SIGKILL)
			<-done
		}
	})
	return done
}

// job is a process tree started in a job cgroup.
type job struct {
	cmd  *exec.Cmd
	done chan struct{}
	rel  string
	g    *cgroup.Group
}

// startJob makes the cgroup rel and runs /bin/sh -c script in it: the
// shell is held on a pipe until its pid is in every hierarchy's
// cgroup.procs, so no process of the script runs outside.
func (w *world) startJob(rel, script string) *job {
	w.t.Helper()
	g, err := w.h.New(rel, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `read _ && exec /bin/sh -c "$0"`, script)
	in, err := cmd.StdinPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	j := &job{cmd: cmd, done: make(chan struct{}), rel: rel, g: g}
	go func() {
		_ = cmd.Wait()
		close(j.done)
	}()
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if g, err := w.h.Load(rel); err == nil {
			_ = g.Kill(ctx)
		}
		<-j.done
	})
	p := g.Placement()
	files := p.ProcsFiles
	if p.UnifiedDir != "" {
		files = append(files, filepath.Join(p.UnifiedDir, "cgroup.procs"))
	}
	for _, f := range files {
		if err := os.WriteFile(f, []byte(fmt.Sprint(cmd.Process.Pid)), 0); err != nil {
			w.t.Fatal(err)
		}
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		w.t.Fatal(err)
	}
	_ = in.Close()
	return j
}

// pids lists every process in the job's cgroup (and below).
func (w *world) pids(j *job) []int {
	w.t.Helper()
	pids, err := j.g.Pids()
	if err != nil && !errors.Is(err, cgroup.ErrNotExist) {
		w.t.Fatal(err)
	}
	return pids
}

// startJobs starts the workload every test uses: a job that forks a
// process into a session of its own and one that ignores SIGTERM, and a
// job of a sharing group; it waits until each cgroup holds its
// processes and returns them all.
func (w *world) startJobs() ([]*job, []int) {
	w.t.Helper()
	js := []*job{
		w.startJob("jobs/forker", "setsid sleep 1000 & exec sleep 1000"),
		w.startJob("jobs/stubborn", `trap "" TERM; sleep 1000 & wait`),
		w.startJob("groups/pair/member", "sleep 1000 & sleep 1000 & wait"),
	}
	var all []int
	testutil.Eventually(w.t, 20*time.Second, "every job's processes in its cgroup", func() bool {
		all = nil
		for _, j := range js {
			p := w.pids(j)
			if len(p) < 2 {
				return false
			}
			all = append(all, p...)
		}
		return true
	})
	return js, all
}

// exists reports whether rel is a cgroup in any hierarchy.
func (w *world) exists(rel string) bool {
	_, err := w.h.Load(rel)
	return err == nil
}

// acked waits until the guard has acknowledged the client's newest
// deadline.
func (w *world) acked(c *Client) {
	w.t.Helper()
	testutil.Eventually(w.t, 20*time.Second, "the guard's acknowledgement of the deadline", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.acked != 0 && c.acked == c.latest
	})
}

func alive(pids []int) []int {
	var out []int
	for _, p := range pids {
		if testutil.Alive(p) {
			out = append(out, p)
		}
	}
	return out
}

// The deadline passes: every process of every job cgroup is killed (a
// forked child in its own session, a process that ignores SIGTERM, a
// sharing group's job), every job and group cgroup removed, and the guard
// exits; whether the agent is gone (its connection closed) or hung
// (connected, sending nothing).
func TestDeadlinePassesKillsEveryJob(t *testing.T) {
	for _, tc := range []struct {
		name string
		gone bool
	}{{"agent killed", true}, {"agent hung", false}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			_, pids := w.startJobs()
			c, exited := w.connect()
			deadline := time.Now().Add(1500 * time.Millisecond)
			c.Deadline(deadline)
			if tc.gone {
				w.acked(c)
				c.Close()
			}
			select {
			case <-exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("guard still running 60 s after the deadline")
			}
			if time.Now().Before(deadline) {
				t.Errorf("guard exited %s before the deadline", time.Until(deadline))
			}
			if left := alive(pids); len(left) > 0 {
				t.Errorf("processes %v of %v alive after the guard's kill", left, pids)
			}
			for _, rel := range []string{"jobs/forker", "jobs/stubborn", "groups/pair/member", "groups/pair"} {
				if w.exists(rel) {
					t.Errorf("cgroup %s still exists after the guard's kill", rel)
				}
			}
			if !tc.gone {
				// The hung agent comes back and stops cleanly: the guard
				// it would release is gone, which is no error.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if err := c.Release(ctx); err != nil {
					t.Errorf("release after the guard killed and exited: %v", err)
				}
			}
		})
	}
}

// oneSocket checks that the data_dir holds one socket, SocketPath: the
// previous release's runs socket is gone.
func (w *world) oneSocket() {
	w.t.Helper()
	ents, err := os.ReadDir(w.dataDir)
	if err != nil {
		w.t.Fatal(err)
	}
	var socks []string
	for _, e := range ents {
		if e.Type()&os.ModeSocket != 0 {
			socks = append(socks, e.Name())
		}
	}
	if len(socks) != 1 || filepath.Join(w.dataDir, socks[0]) != SocketPath(w.dataDir) {
		w.t.Errorf("sockets in the data_dir: %v, want %s alone", socks, filepath.Base(SocketPath(w.dataDir)))
	}
}

// A guard in a time namespace whose clocks run 10 minutes ahead
// (unshare --time --boottime 600 --monotonic 600, as an agent started in
// one starts it) holds the deadline of an agent outside it at the real
// time: it kills neither 10 minutes early (at once) nor late.
func TestDeadlineAcrossTimeNamespaces(t *testing.T) {
	unshare := testutil.Unshare(t)
	w := newWorld(t)
	_, pids := w.startJobs()
	opts := w.options()
	opts.Command = append([]string{unshare, "--time", "--boottime", "600", "--monotonic", "600"}, opts.Command...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	exited := w.reaped(c.PID())
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/timens_offsets", c.PID())); err != nil || !strings.Contains(string(b), "600") {
		t.Fatalf("the guard's time namespace offsets: %q, %v; want 600 s", b, err)
	}
	const ttl = 3 * time.Second
	deadline := time.Now().Add(ttl)
	c.Deadline(deadline)
	w.acked(c)
	c.Close()
	select {
	case <-exited:
	case <-time.After(testutil.Deadline(ttl + 20*time.Second)):
		t.Fatalf("the guard in a time namespace still runs %s after the deadline", time.Since(deadline).Round(time.Millisecond))
	}
	if early := time.Until(deadline); early > 0 {
		t.Errorf("the guard in a time namespace killed %s before the deadline", early)
	}
	if left := alive(pids); len(left) > 0 {
		t.Errorf("processes %v of %v alive after the guard's kill", left, pids)
	}
}

// inLeaf checks that pid sits in <root>/guard in every hierarchy berth
// uses (/proc/PID/cgroup), never in a job's cgroup.
func (w *world) inLeaf(pid int) {
	w.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		w.t.Fatal(err)
	}
	want := "/" + w.root + "/" + CgroupLeaf
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || strings.HasPrefix(parts[1], "name=") || parts[1] == "devices" {
			continue // hierarchies berth does not use
		}
		if parts[1] == "net_cls,net_prio" || parts[1] == "perf_event" || parts[1] == "hugetlb" || parts[1] == "rdma" || parts[1] == "misc" {
			continue
		}
		if parts[2] != want {
			w.t.Errorf("guard %d in %s in hierarchy %q, want %s", pid, parts[2], parts[1], want)
		}
		n++
	}
	if n == 0 {
		w.t.Errorf("guard %d in no hierarchy berth uses:\n%s", pid, b)
	}
}

// Deadlines that keep coming keep every job running; a release makes the
// guard exit without killing anything. The guard sits in its own leaf.
func TestRenewedDeadlineKeepsJobsAndReleaseKillsNothing(t *testing.T) {
	w := newWorld(t)
	_, pids := w.startJobs()
	c, exited := w.connect()
	w.inLeaf(c.PID())
	w.oneSocket()
	// Renew as a session does, well past several deadlines' length.
	const ttl = 800 * time.Millisecond
	first := time.Now()
	for time.Since(first) < 4*ttl {
		c.Deadline(time.Now().Add(ttl))
		time.Sleep(ttl / 4)
		if left := alive(pids); len(left) != len(pids) {
			t.Fatalf("after %s of renewals only %v of %v alive", time.Since(first), left, pids)
		}
	}
	w.acked(c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("guard still running 20 s after its release")
	}
	// Past the last deadline: nothing was killed.
	testutil.Eventually(t, 20*time.Second, "the last deadline passed", func() bool {
		return time.Since(first) > 6*ttl
	})
	if left := alive(pids); len(left) != len(pids) {
		t.Errorf("after the release only %v of %v alive", left, pids)
	}
	if _, err := os.Stat(SocketPath(w.dataDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after the guard exited: %v", err)
	}
}

// A second agent that connects before the deadline and sends a later one
// takes over: the first agent's deadline no longer applies; a third
// Start finds the same guard.
func TestSecondAgentTakesOver(t *testing.T) {
	w := newWorld(t)
	_, pids := w.startJobs()
	first, exited := w.connect()
	firstGuard := first.PID()
	early := time.Now().Add(time.Second)
	first.Deadline(early)
	w.acked(first)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	second, err := Start(ctx, w.options())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if second.PID() != firstGuard {
		t.Fatalf("second agent started guard %d while %d runs", second.PID(), firstGuard)
	}
	second.Deadline(time.Now().Add(time.Minute))
	w.acked(second)
	first.Close() // the old agent dies
	testutil.Eventually(t, 20*time.Second, "the first agent's deadline passed", func() bool {
		return time.Since(early) > time.Second
	})
	if left := alive(pids); len(left) != len(pids) {
		t.Errorf("after the first agent's deadline only %v of %v alive", left, pids)
	}
	select {
	case <-exited:
		t.Fatal("guard exited at the first agent's deadline")
	default:
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-exited
}

// A peer that speaks another protocol version is told so and
// disconnected, and one that sends anything before its hello is
// disconnected; the guard goes on serving its agent.
func TestOtherVersionRefused(t *testing.T) {
	w := newWorld(t)
	c, exited := w.connect()
	pid := c.PID()
	for name, first := range map[string]runMsg{
		"other version":     {Op: opHello, Version: Version + 1, PID: os.Getpid()},
		"list before hello": {Op: opList},
	} {
		conn, err := net.Dial("unixpacket", SocketPath(w.dataDir))
		if err != nil {
			t.Fatal(err)
		}
		mc := &msgConn{c: conn.(*net.UnixConn)}
		if err := mc.send(first); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(testutil.Deadline(20 * time.Second)))
		buf, oob := newRecvBuffers()
		a, _, err := mc.recv(buf, oob)
		if first.Op == opHello && (err != nil || a.Op != opHello || a.Error == "" || a.Version != Version) {
			t.Errorf("%s: answer %+v, %v; want a hello naming version %d, with an error", name, a, err, Version)
		}
		if first.Op == opHello {
			a, _, err = mc.recv(buf, oob)
		}
		if err == nil {
			t.Errorf("%s: the guard answered %+v and kept the connection", name, a)
		}
		conn.Close()
	}
	c.Deadline(time.Now().Add(time.Minute))
	w.acked(c)
	if c.PID() != pid {
		t.Errorf("the agent now talks to guard %d, not %d: the refused peer ended the first", c.PID(), pid)
	}
	select {
	case <-exited:
		t.Fatal("guard exited after a peer of another version")
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A guard that no agent ever says hello to (its agent died while starting
// it) kills every job after helloGrace and exits: it never lingers.
func TestGuardWithoutAgentKillsAndExits(t *testing.T) {
	w := newWorld(t)
	_, pids := w.startJobs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	started := time.Now()
	if err := spawn(ctx, w.options()); err != nil {
		t.Fatal(err)
	}
	leaf, err := w.h.Load(CgroupLeaf)
	if err != nil {
		t.Fatal(err)
	}
	guards, err := leaf.Pids()
	if err != nil || len(guards) != 1 {
		t.Fatalf("processes in the guard's leaf: %v (%v), want one", guards, err)
	}
	exited := w.reaped(guards[0])
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("guard without an agent still running after 60 s")
	}
	if d := time.Since(started); d < helloGrace {
		t.Errorf("guard without an agent exited after %s, before its %s grace", d, helloGrace)
	}
	if left := alive(pids); len(left) > 0 {
		t.Errorf("processes %v alive after the guard without an agent exited", left)
	}
}

// Packets of the previous release's deadline protocol (legacy.go) of
// another size, version or kind are refused; every kind survives a round
// trip.
func TestDecodeV1(t *testing.T) {
	for _, k := range []kind{kindHello, kindDeadline, kindRelease, kindAck} {
		m := message{kind: k, value: 1<<63 + 7}
		got, err := decode(m.encode())
		if err != nil || got != m {
			t.Errorf("decode(encode(%v)) = %v, %v", m, got, err)
		}
	}
	good := message{kind: kindHello}.encode()
	otherVersion := append([]byte(nil), good...)
	otherVersion[0] = v1Version + 1
	unknownKind := append([]byte(nil), good...)
	unknownKind[1] = 9
	for name, b := range map[string][]byte{
		"short": good[:v1Size-1], "long": append(append([]byte(nil), good...), 0), "empty": nil,
		"other version": otherVersion, "unknown kind": unknownKind,
	} {
		if m, err := decode(b); err == nil {
			t.Errorf("%s packet decoded as %v", name, m)
		}
	}
}

// The guard does not inherit what systemd meant for the agent alone.
func TestGuardEnviron(t *testing.T) {
	got := guardEnviron([]string{"PATH=/bin", "NOTIFY_SOCKET=/run/systemd/notify", "WATCHDOG_USEC=30000000",
		"WATCHDOG_PID=1", "LISTEN_FDS=1", "INVOCATION_ID=x"})
	want := []string{"PATH=/bin", "INVOCATION_ID=x"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("guardEnviron = %v, want %v", got, want)
	}
}

// A guard that accepts connections but does not answer (stopped) is ended
// through its cgroup leaf: the next agent's Start ends it and starts a new
// one, and a release that finds one ends it rather than leave its leaf
// (and so the cgroup root) behind.
func TestHungGuardIsEnded(t *testing.T) {
	w := newWorld(t)
	first, exited := w.connect()
	stopGuard(t, first.PID())
	first.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(60*time.Second))
	defer cancel()
	second, err := Start(ctx, w.options())
	if err != nil {
		t.Fatalf("start beside a stopped guard: %v", err)
	}
	defer second.Close()
	select {
	case <-exited:
	case <-ctx.Done():
		t.Fatal("the stopped guard was not ended")
	}
	if second.PID() == first.PID() || second.PID() == 0 {
		t.Fatalf("second guard pid %d, first %d", second.PID(), first.PID())
	}
	// The new guard starts jobs: its leaf is not the one the kill of the
	// stopped guard went through (a CLONE_INTO_CGROUP child of a task in
	// a killed cgroup is SIGKILLed before its exec; enterLeaf).
	second.Deadline(time.Now().Add(time.Hour))
	w.acked(second)
	startsAJob(t, w, second, "after-hung")
	again := w.reaped(second.PID())
	stopGuard(t, second.PID())
	if err := second.Release(ctx); err != nil {
		t.Fatalf("release of a stopped guard: %v", err)
	}
	select {
	case <-again:
	case <-ctx.Done():
		t.Fatal("the stopped guard was not ended at release")
	}
}

// startsAJob has the guard behind c start a job whose program writes a
// line and runs on, and checks that it does: the line comes, and no exit.
func startsAJob(t *testing.T, w *world, c *Client, name string) {
	t.Helper()
	if _, err := w.h.New("jobs/"+name, nil); err != nil {
		t.Fatal(err)
	}
	r, wp, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	exits := make(chan unix.WaitStatus, 1)
	run, err := c.Spawn(&worker.Exec{Path: "/bin/sh", Argv: []string{"sh", "-c", "echo up; exec sleep 1000"}, Env: []string{"PATH=/usr/bin:/bin"}},
		worker.Run{JobID: name, Cgroup: "jobs/" + name, Fingerprint: "f-" + name}, wp, int(r.Fd()), func(ws unix.WaitStatus) { exits <- ws })
	wp.Close()
	if err != nil {
		t.Fatalf("start a job through the new guard: %v", err)
	}
	line := make(chan string, 1)
	go func() {
		b := make([]byte, 16)
		n, _ := r.Read(b)
		line <- string(b[:n])
	}()
	select {
	case l := <-line:
		if strings.TrimSpace(l) != "up" {
			t.Fatalf("job %s wrote %q, want \"up\"", name, l)
		}
	case ws := <-exits:
		t.Fatalf("job %s (pid %d) ended before its program ran: %v", name, run.PID, ws)
	case <-time.After(testutil.Deadline(20 * time.Second)):
		t.Fatalf("job %s wrote nothing", name)
	}
	select {
	case ws := <-exits:
		t.Fatalf("job %s ended: %v", name, ws)
	default:
	}
	if err := unix.Kill(run.PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exits
	c.Forget(run)
}

// stopGuard sends SIGSTOP to the guard pid and waits until it is stopped
// (state T): kill(2) returns before a process running on another CPU has
// stopped, and it could still answer a message sent meanwhile.
func stopGuard(t *testing.T, pid int) {
	t.Helper()
	testutil.Stop(t, pid)
}

// A guard that runs but answers late (here frozen in its cgroup, as one
// forking thousands of jobs on a loaded host is slow) is not taken for
// hung: ending it would kill every job's main process. Once it answers
// again it holds the newest deadline, not the one the failed round began
// with.
func TestSlowGuardIsNotEnded(t *testing.T) {
	w := newWorld(t)
	c, exited := w.connect()
	defer c.Close()
	pid := c.PID()
	c.Deadline(time.Now().Add(time.Hour))
	w.acked(c)
	g, err := w.h.Load(CgroupLeaf)
	if err != nil {
		t.Fatal(err)
	}
	freeze := filepath.Join(g.Placement().UnifiedDir, "cgroup.freeze")
	if _, err := os.Stat(freeze); err != nil {
		t.Skipf("no cgroup2 freezer for the guard's leaf (Linux 5.2): %v", err)
	}
	if err := os.WriteFile(freeze, []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := os.WriteFile(freeze, []byte("0"), 0); err != nil {
				t.Error(err)
			}
		}
	}
	defer thaw()
	// Two deadlines without an answer, each of which used to end the
	// guard.
	for i := 1; i <= 2; i++ {
		c.Deadline(time.Now().Add(time.Hour + time.Duration(i)*time.Minute))
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("deadline %d to the frozen guard unanswered", i), func() bool {
			c.runs.mu.Lock()
			defer c.runs.mu.Unlock()
			return c.runs.silent >= i
		})
	}
	select {
	case <-exited:
		t.Fatal("the frozen guard was ended")
	default:
	}
	thaw()
	last := time.Now().Add(2 * time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(30*time.Second))
	defer cancel()
	if err := c.DeadlineSync(ctx, last); err != nil {
		t.Fatalf("the thawed guard did not hold the newest deadline: %v", err)
	}
	if c.PID() != pid {
		t.Errorf("guard pid %d after the thaw, was %d", c.PID(), pid)
	}
	select {
	case <-exited:
		t.Fatal("the guard exited")
	default:
	}
}

// The longest data_dir validation accepts gives a socket path that fits
// in sun_path (108 bytes with its NUL, unix(7)).
func TestLongestDataDirFitsTheSocket(t *testing.T) {
	dir := "/" + strings.Repeat("d", config.MaxDataDirLen-1)
	if n := len(SocketPath(dir)); n > 107 {
		t.Fatalf("socket path of the longest data_dir is %d bytes, more than 107", n)
	}
	if n := len(SocketPath(dir + "d")); n <= 107 {
		t.Fatalf("config.MaxDataDirLen is not the bound: one byte more still fits (%d)", n)
	}
}
