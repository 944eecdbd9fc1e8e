package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	jobspec "github.com/berthd/berth/spec"
)

var testPATH = "PATH=/usr/local/bin:/usr/bin:/bin"

// sh returns a Spec running script with /bin/sh in group g.
func sh(g *testGroup, script string) Spec {
	return Spec{
		JobID:   "job",
		Path:    "/bin/sh",
		Args:    []string{"sh", "-c", script},
		Env:     []string{testPATH},
		Group:   g,
		Runtime: testRT,
	}
}

// startWorker starts spec and stops the worker in cleanup (before the
// group's cleanup removes the cgroup).
func startWorker(t testing.TB, spec Spec) *Worker {
	t.Helper()
	return started(t, New(spec))
}

// started starts w and stops it at the end of the test.
func started(t testing.TB, w *Worker) *Worker {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(30*time.Second))
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("cleanup stop: %v", err)
		}
	})
	w.Start()
	return w
}

func waitRunning(t testing.TB, w *Worker) int {
	t.Helper()
	deadline := time.Now().Add(testutil.Deadline(20 * time.Second))
	for {
		st := w.Status()
		if st.State == Running {
			return st.PID
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: worker %s, want running (status %+v)", testutil.Deadline(20*time.Second), st.State, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitState(t testing.TB, w *Worker, want State) Status {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, fmt.Sprintf("worker %s (status %+v)", want, w.Status()), func() bool { return w.Status().State == want })
	return w.Status()
}

// procField returns the value of key in /proc/pid/status.
func procField(pid int, key string) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// children maps each pid to its children, from /proc/*/status PPid.
func children() map[int][]int {
	out := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := procField(pid, "PPid"); ok {
			ppid, _ := strconv.Atoi(pp)
			out[ppid] = append(out[ppid], pid)
		}
	}
	return out
}

// descendants lists pid's descendants (not pid itself).
func descendants(pid int) []int {
	kids := children()
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range kids[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// zombieChildren lists our children in Z state.
func zombieChildren() []int {
	var out []int
	for _, pid := range children()[os.Getpid()] {
		if st, ok := procField(pid, "State"); ok && strings.HasPrefix(st, "Z") {
			out = append(out, pid)
		}
	}
	return out
}

// checkInGroup fails t unless /proc/pid/cgroup names the group in every
// hierarchy the group's Placement lists (each v1 controller, and the cgroup2
// line "0::" when the group has a cgroup2 directory).
func checkInGroup(t testing.TB, pid int, g *testGroup) {
	t.Helper()
	place := g.Placement()
	want := map[string]bool{} // hierarchy key in /proc/pid/cgroup: "cpu", "memory", "" for cgroup2
	for _, f := range place.ProcsFiles {
		rel, err := filepath.Rel("/sys/fs/cgroup", f)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("procs file %s not under /sys/fs/cgroup", f)
		}
		for _, c := range strings.Split(strings.SplitN(rel, "/", 2)[0], ",") {
			want[c] = true
		}
	}
	if place.UnifiedDir != "" {
		want[""] = true
	}
	if len(want) == 0 {
		t.Fatal("group placement lists no hierarchy")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatalf("read cgroup of %d: %v", pid, err)
	}
	found := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if !want[c] {
				continue
			}
			found[c] = true
			// cgroup2 holds each run in a leaf below the group (run-<n>),
			// a descendant run's process may sit deeper still.
			if c == "" && !strings.Contains(parts[2]+"/", "/"+g.name+"/") || c != "" && !strings.HasSuffix(parts[2], "/"+g.name) {
				t.Errorf("pid %d hierarchy %q: cgroup %s, want .../%s", pid, c, parts[2], g.name)
			}
		}
	}
	for c := range want {
		if !found[c] {
			t.Errorf("pid %d: no %q line in /proc/%d/cgroup:\n%s", pid, c, pid, b)
		}
	}
}

// A job whose first act is to fork 20 children: the job and every
// descendant are in the job's cgroup in every v1 controller.
func TestStartsInsideCgroup(t *testing.T) {
	g := newTestGroup(t, 0)
	w := startWorker(t, sh(g, `for i in $(seq 20); do sleep 60 & done; wait`))
	pid := waitRunning(t, w)
	testutil.Eventually(t, 10*time.Second, "20 children", func() bool { return len(descendants(pid)) >= 20 })
	checkInGroup(t, pid, g)
	for _, d := range descendants(pid) {
		checkInGroup(t, d, g)
	}
}

func TestEnvArgsDirUser(t *testing.T) {
	g := newTestGroup(t, 0)
	var logs testutil.SyncBuffer
	spec := sh(g, `echo "foo=$FOO arg=$1 dir=$(pwd) uid=$(id -u) gid=$(id -g)"; exec sleep 60`)
	spec.Args = append(spec.Args, "sh", "first")
	spec.Env = append(spec.Env, "FOO=bar")
	spec.Dir = "/usr"
	spec.User = "nobody"
	spec.Log = &logs
	w := startWorker(t, spec)
	pid := waitRunning(t, w)
	want := "foo=bar arg=first dir=/usr uid=65534 gid=65534\n"
	testutil.Eventually(t, 10*time.Second, "job output "+want, func() bool { return strings.Contains(logs.String(), want) })
	uid, _ := procField(pid, "Uid")
	if f := strings.Fields(uid); len(f) == 0 || f[0] != "65534" {
		t.Errorf("/proc/%d/status Uid = %q, want 65534", pid, uid)
	}
	checkInGroup(t, pid, g)
	if !strings.Contains(logs.String(), fmt.Sprintf("berth: started pid %d\n", pid)) {
		t.Errorf("log has no start marker for %d:\n%s", pid, logs.String())
	}
}

// C18 (supervisor#307): a job run as another user gets USER, LOGNAME,
// HOME and SHELL from the user's passwd entry and systemd's default PATH,
// as systemd sets them for User=; what the job's env sets wins.
func TestLoginEnvironment(t *testing.T) {
	g := newTestGroup(t, 0)
	var logs testutil.SyncBuffer
	spec := sh(g, `echo "user=$USER logname=$LOGNAME home=$HOME shell=$SHELL path=$PATH sleep=$(command -v sleep)"`)
	spec.Env = []string{"HOME=/tmp"}
	spec.User = "nobody"
	spec.Log = &logs
	w := startWorker(t, spec)
	st := waitState(t, w, Exited)
	if st.LastExit == nil || st.LastExit.Code != 0 {
		t.Fatalf("last exit %+v\n%s", st.LastExit, logs.String())
	}
	<-w.Done()
	sleep := "" // where the default PATH finds sleep on this host
	for _, d := range filepath.SplitList(DefaultPath) {
		if _, err := os.Stat(filepath.Join(d, "sleep")); err == nil {
			sleep = filepath.Join(d, "sleep")
			break
		}
	}
	want := "user=nobody logname=nobody home=/tmp shell=" + shellOf(t, "nobody") + " path=" + DefaultPath + " sleep=" + sleep + "\n"
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log:\n%s\nwant a line %q", logs.String(), want)
	}
}

// shellOf reads the login shell of name from /etc/passwd.
func shellOf(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[0] == name {
			return f[6]
		}
	}
	t.Fatalf("%s not in /etc/passwd", name)
	return ""
}

func TestUserWithGroup(t *testing.T) {
	g := newTestGroup(t, 0)
	var logs testutil.SyncBuffer
	spec := sh(g, `echo "ids=$(id -u):$(id -g)"`)
	spec.User = "65534:0"
	spec.Log = &logs
	w := startWorker(t, spec)
	st := waitState(t, w, Exited)
	if st.LastExit == nil || st.LastExit.Code != 0 {
		t.Fatalf("last exit %+v", st.LastExit)
	}
	<-w.Done()
	if !strings.Contains(logs.String(), "ids=65534:0\n") {
		t.Errorf("log:\n%s", logs.String())
	}
}

func TestStartErrors(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		modify func(*Spec)
		reason string
	}{
		{"missing file", func(s *Spec) { s.Path, s.Args = "/nonexistent/berth-cmd", nil }, "no such file"},
		{"missing in PATH", func(s *Spec) { s.Path, s.Args = "berth-no-such-cmd", nil }, "not found in $PATH"},
		{"not executable", func(s *Spec) { s.Path, s.Args = notExec, nil }, "permission denied"},
		{"unknown user", func(s *Spec) { s.User = "berth-no-such-user" }, "berth-no-such-user"},
		{"unknown group", func(s *Spec) { s.User = "nobody:berth-no-such-group" }, "berth-no-such-group"},
		{"bad dir", func(s *Spec) { s.Dir = "/nonexistent/berth-dir" }, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestGroup(t, 0)
			var logs testutil.SyncBuffer
			spec := sh(g, "exit 0")
			spec.Restart = jobspec.RestartAlways
			spec.Log = &logs
			tc.modify(&spec)
			w := startWorker(t, spec)
			select {
			case <-w.Done():
			case <-time.After(testutil.Deadline(10 * time.Second)):
				t.Fatalf("worker did not end; status %+v", w.Status())
			}
			st := w.Status()
			if st.State != Failed || !strings.Contains(st.Reason, tc.reason) {
				t.Errorf("status %+v, want failed with reason containing %q", st, tc.reason)
			}
			if st.Restarts != 0 {
				t.Errorf("restarts = %d after a start error, want 0", st.Restarts)
			}
			if !strings.Contains(logs.String(), "berth: start failed: ") {
				t.Errorf("log has no start-failed marker:\n%s", logs.String())
			}
		})
	}
}

var fastBackoff = Backoff{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond, Reset: time.Hour}

func TestRestartPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy   jobspec.Restart
		script   string
		restarts bool
		code     int
	}{
		{jobspec.RestartNever, "exit 1", false, 1},
		{jobspec.RestartNever, "exit 0", false, 0},
		{jobspec.RestartOnFailure, "exit 0", false, 0},
		{jobspec.RestartOnFailure, "exit 2", true, 2},
		{jobspec.RestartOnFailure, "kill -TERM $$", true, -1},
		{jobspec.RestartAlways, "exit 0", true, 0},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.policy, tc.script), func(t *testing.T) {
			g := newTestGroup(t, 0)
			spec := sh(g, tc.script)
			spec.Restart = tc.policy
			spec.Backoff = fastBackoff
			w := startWorker(t, spec)
			if tc.restarts {
				testutil.Eventually(t, 10*time.Second, "3 restarts", func() bool { return w.Status().Restarts >= 3 })
			} else {
				<-w.Done()
			}
			st := w.Status()
			if !tc.restarts && (st.State != Exited || st.Restarts != 0) {
				t.Errorf("status %+v, want exited without restart", st)
			}
			if st.LastExit == nil || st.LastExit.Code != tc.code {
				t.Errorf("last exit %+v, want code %d", st.LastExit, tc.code)
			}
		})
	}
}

func TestBackoffDelays(t *testing.T) {
	b := Backoff{}.withDefaults()
	if b != DefaultBackoff() {
		t.Fatalf("defaults %+v, want %+v", b, DefaultBackoff())
	}
	var got []time.Duration
	d := time.Duration(0)
	for range 9 {
		d = b.next(d, time.Second)
		got = append(got, d)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("delays %v, want %v s", got, want)
		}
	}
	if d := b.next(60*time.Second, 10*time.Minute); d != time.Second {
		t.Errorf("after a 10 min run delay = %s, want reset to 1s", d)
	}
}

// A restarting worker reports a growing NextRestart delay.
func TestBackoffObserved(t *testing.T) {
	g := newTestGroup(t, 0)
	spec := sh(g, "exit 1")
	spec.Restart = jobspec.RestartAlways
	spec.Backoff = Backoff{Initial: 50 * time.Millisecond, Max: 400 * time.Millisecond, Reset: time.Hour}
	w := startWorker(t, spec)
	delays := map[int]time.Duration{}
	testutil.Eventually(t, 20*time.Second, "5 restarts", func() bool {
		st := w.Status()
		if st.State == BackingOff && st.LastExit != nil {
			delays[st.Restarts] = st.NextRestart.Sub(st.LastExit.Time)
		}
		return st.Restarts >= 5
	})
	// Delay k (0-based) is 50ms·2^k capped at 400ms, counted from the exit;
	// Status is sampled, so compare the ones we saw.
	for k, d := range delays {
		if want := min(50*time.Millisecond<<k, 400*time.Millisecond); d != want {
			t.Errorf("restart %d: delay %s, want %s", k, d, want)
		}
	}
	if len(delays) == 0 {
		t.Error("never saw the worker in backoff")
	}
}

// Remake is asked before every restart, never before the first start: a
// job's cgroup removed from outside between two runs is made again
// before the next one (C33; the real removal is test.TestC33...).
func TestRemakeBeforeEveryRestart(t *testing.T) {
	g := newTestGroup(t, 0)
	spec := sh(g, "exit 1")
	spec.Restart = jobspec.RestartAlways
	spec.Backoff = Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond, Reset: time.Hour}
	var calls atomic.Int32
	spec.Remake = func() ([]string, error) {
		calls.Add(1)
		return nil, nil
	}
	w := startWorker(t, spec)
	testutil.Eventually(t, 20*time.Second, "3 restarts", func() bool { return w.Status().Restarts >= 3 })
	n, restarts := calls.Load(), w.Status().Restarts
	if n == 0 || int(n) > restarts {
		t.Errorf("Remake asked %d times in %d restarts, want once before each restart", n, restarts)
	}
}

func TestSignalExit(t *testing.T) {
	g := newTestGroup(t, 0)
	w := startWorker(t, sh(g, "kill -USR1 $$"))
	<-w.Done()
	e := w.Status().LastExit
	if e == nil || e.Code != -1 || e.Signal != "SIGUSR1" || e.Reason != "killed by SIGUSR1" || e.OOMKilled {
		t.Errorf("last exit %+v, want killed by SIGUSR1", e)
	}
}

// 200 short-lived background children, then exit 3: the job's status
// is still reported, and no zombie is left.
func TestNoZombiesAndExitStatus(t *testing.T) {
	g := newTestGroup(t, 0)
	w := startWorker(t, sh(g, `for i in $(seq 200); do /bin/true & done; exit 3`))
	select {
	case <-w.Done():
	case <-time.After(testutil.Deadline(30 * time.Second)):
		t.Fatalf("worker did not end: %+v", w.Status())
	}
	st := w.Status()
	if st.State != Exited || st.LastExit == nil || st.LastExit.Code != 3 || st.LastExit.Reason != "exited 3" {
		t.Fatalf("status %+v, last exit %+v, want exited 3", st, st.LastExit)
	}
	testutil.Eventually(t, 10*time.Second, "no zombie children", func() bool { return len(zombieChildren()) == 0 })
}

// 50 workers started at once from concurrent goroutines are all alive
// 5 s later (Pdeathsig is tied to the launcher thread, which never exits).
func TestConcurrentStartsStayAlive(t *testing.T) {
	const n = 50
	ws := make([]*Worker, n)
	specs := make([]Spec, n)
	for i := range specs {
		specs[i] = sh(newTestGroup(t, 0), "exec sleep 120")
	}
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = New(specs[i])
		w := ws[i]
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		wg.Go(func() {
			runtime.LockOSThread() // a thread that exits right after the request, as an HTTP handler's may
			w.Start()
		})
	}
	wg.Wait()
	t0 := time.Now()
	pids := make([]int, n)
	for i, w := range ws {
		pids[i] = waitRunning(t, w)
	}
	t.Logf("%d workers running %s after the last Start", n, time.Since(t0))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for i, pid := range pids {
			if !testutil.Alive(pid) {
				t.Fatalf("worker %d pid %d died: %+v", i, pid, ws[i].Status())
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Grandchildren do not survive Stop.
func TestStopKillsDescendants(t *testing.T) {
	g := newTestGroup(t, 0)
	spec := sh(g, `sh -c "sleep 1000 & sleep 1000" & wait`)
	spec.StopTimeout = 5 * time.Second
	w := startWorker(t, spec)
	pid := waitRunning(t, w)
	testutil.Eventually(t, 10*time.Second, "4 processes", func() bool { return len(descendants(pid)) >= 3 })
	all := append([]int{pid}, descendants(pid)...)
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := w.Status(); st.State != Stopped {
		t.Errorf("state %s, want stopped", st.State)
	}
	for _, p := range all {
		if testutil.Alive(p) {
			t.Errorf("pid %d still alive after stop", p)
		}
	}
}

// When the main process exits by itself, the rest of its cgroup is killed
// before the worker reports it.
func TestExitKillsDescendants(t *testing.T) {
	g := newTestGroup(t, 0)
	var logs testutil.SyncBuffer
	// The background process prints its pid as the host sees it (read
	// from /proc/self/stat by a builtin; $! is the jobs namespace's).
	f := filepath.Join(t.TempDir(), "bg")
	spec := sh(g, `setsid sh -c 'read -r p _ </proc/self/stat; echo "bg=$p" >`+f+`; exec sleep 1000' &
until [ -s `+f+` ]; do sleep 0.05; done; cat `+f+`; exit 0`)
	spec.Log = &logs
	w := startWorker(t, spec)
	<-w.Done()
	_, after, ok := strings.Cut(logs.String(), "bg=")
	if !ok {
		t.Fatalf("no bg pid in log:\n%s", logs.String())
	}
	bg, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(after, "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	if testutil.Alive(bg) {
		t.Errorf("background pid %d outlived its job", bg)
	}
}

// A TERM-ignoring job is killed after StopTimeout and no goroutine of
// the worker is left.
func TestStopTimeoutKills(t *testing.T) {
	g := newTestGroup(t, 0)
	var logs testutil.SyncBuffer
	before := runtime.NumGoroutine()
	spec := sh(g, `trap "" TERM; while :; do sleep 1; done`)
	spec.StopTimeout = time.Second
	spec.Log = &logs
	w := New(spec)
	w.Start()
	pid := waitRunning(t, w)
	testutil.Eventually(t, 30*time.Second, "trap installed", func() bool { return len(descendants(pid)) > 0 })
	t0 := time.Now()
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	if took < time.Second || took > time.Second+testutil.Deadline(2*time.Second) { // well below the 10 s default grace
		t.Errorf("stop took %s, want about 1s", took)
	}
	if testutil.Alive(pid) {
		t.Errorf("pid %d alive after stop", pid)
	}
	if e := w.Status().LastExit; e == nil || e.Signal != "SIGKILL" || e.OOMKilled {
		t.Errorf("last exit %+v, want SIGKILL, not OOM", e)
	}
	if !strings.Contains(logs.String(), "berth: stop timeout after 1s") {
		t.Errorf("log:\n%s", logs.String())
	}
	if err := w.Stop(context.Background()); err != nil { // idempotent
		t.Errorf("second stop: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= before })
}

func TestStopDuringBackoff(t *testing.T) {
	g := newTestGroup(t, 0)
	spec := sh(g, "exit 0")
	spec.Restart = jobspec.RestartAlways
	spec.Backoff = Backoff{Initial: time.Hour}
	w := startWorker(t, spec)
	st := waitState(t, w, BackingOff)
	if st.NextRestart.IsZero() {
		t.Errorf("backoff without NextRestart: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(5*time.Second))
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Status(); st.State != Stopped || st.Restarts != 0 || !st.NextRestart.IsZero() {
		t.Errorf("status %+v, want stopped with no restart", st)
	}
}

func TestStopBeforeStart(t *testing.T) {
	w := New(Spec{JobID: "never"})
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.Start() // no effect after Stop
	<-w.Done()
	if st := w.Status(); st.State != Stopped {
		t.Errorf("state %s, want stopped", st.State)
	}
}

// A job over its 32 MiB memory limit is OOM-killed; every exit says so
// and the restarts go on.
func TestOOMKillReported(t *testing.T) {
	g := newTestGroup(t, 32<<20)
	spec := sh(g, `exec tail /dev/zero`) // tail buffers a line that never ends
	spec.Restart = jobspec.RestartAlways
	spec.Backoff = fastBackoff
	w := startWorker(t, spec)
	testutil.Eventually(t, 30*time.Second, "OOM-killed and restarted twice", func() bool {
		st := w.Status()
		return st.Restarts >= 2 && st.LastExit != nil && st.LastExit.OOMKilled
	})
	e := w.Status().LastExit
	if e.Reason != "killed by SIGKILL (OOM kill)" {
		t.Errorf("reason %q", e.Reason)
	}
	if n, err := g.OOMKills(); err != nil || n < 2 {
		t.Errorf("OOMKills = %d, %v; want ≥ 2", n, err)
	}
}

func TestLogFile(t *testing.T) {
	g := newTestGroup(t, 0)
	path := filepath.Join(t.TempDir(), "job.log")
	spec := sh(g, `echo out line; echo err line >&2; exit 1`)
	spec.LogFile = LogConfig{Path: path, MaxBytes: 1 << 20, MaxFiles: 2}
	spec.Restart = jobspec.RestartOnFailure
	spec.Backoff = fastBackoff
	w := startWorker(t, spec)
	testutil.Eventually(t, 10*time.Second, "a restart", func() bool { return w.Status().Restarts >= 1 })
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	// One run: started (written once the job runs, so it may follow the
	// job's first lines), two job lines, exited, restarting.
	if len(lines) < 5 {
		t.Fatalf("log:\n%s", b)
	}
	run := lines[:4]
	started := slices.IndexFunc(run, func(l string) bool { return strings.HasPrefix(l, "berth: started pid ") })
	job := slices.DeleteFunc(slices.Clone(run), func(l string) bool { return strings.HasPrefix(l, "berth: started pid ") })
	if started < 0 || len(job) != 3 || job[0] != "out line" || job[1] != "err line" ||
		!strings.HasPrefix(job[2], "berth: exited pid ") || !strings.HasSuffix(job[2], ": exited 1") ||
		!strings.HasPrefix(lines[4], "berth: restarting in ") {
		t.Errorf("log:\n%s", b)
	}
}

func TestLogRotation(t *testing.T) {
	g := newTestGroup(t, 0)
	dir := t.TempDir()
	spec := sh(g, `head -c 3465000 /dev/zero | tr '\0' x | fold -w 99; echo`)
	spec.LogFile = LogConfig{Path: filepath.Join(dir, "job.log"), MaxBytes: 1 << 20, MaxFiles: 1}
	w := startWorker(t, spec)
	<-w.Done()
	if st := w.Status(); st.LastExit == nil || st.LastExit.Code != 0 {
		t.Fatalf("status %+v", st)
	}
	// 3.5 MB (35000 lines of 99 x) in 1 MiB files, one rotated file kept:
	// the live file plus one.
	testutil.Eventually(t, 10*time.Second, "2 log files", func() bool {
		ents, _ := os.ReadDir(dir)
		return len(ents) == 2
	})
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 1<<20 {
			t.Errorf("%s is %d bytes, over 1 MiB", e.Name(), fi.Size())
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if line != strings.Repeat("x", 99) && !strings.HasPrefix(line, "berth: ") {
				t.Fatalf("%s: torn line %q", e.Name(), line)
			}
		}
	}
}

// While a job runs, the agent holds one descriptor of its log pipe, the
// read end: no write end waits for the next run or marker line. A second
// run after the first one's exit (the pipe without any write end in
// between) is still copied, marker lines included.
func TestRunningJobHoldsOnlyTheReadEnd(t *testing.T) {
	g := newTestGroup(t, 0)
	path := filepath.Join(t.TempDir(), "job.log")
	marker := filepath.Join(t.TempDir(), "ran")
	// The first run exits 1; the second writes a line and stays.
	spec := sh(g, `if [ -e `+marker+` ]; then echo second run; exec sleep 100; fi; touch `+marker+`; echo first run; exit 1`)
	spec.LogFile = LogConfig{Path: path, MaxBytes: 1 << 20, MaxFiles: 2}
	spec.Restart = jobspec.RestartOnFailure
	spec.Backoff = fastBackoff
	w := startWorker(t, spec)
	testutil.Eventually(t, 10*time.Second, "the second run's line in the log", func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), "second run\n")
	})
	st := w.Status()
	if st.State != Running || st.Restarts != 1 {
		t.Fatalf("status %+v, want running after one restart", st)
	}
	pipe, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", st.PID))
	if err != nil || !strings.HasPrefix(pipe, "pipe:") {
		t.Fatalf("the job's stdout is %q (%v), want its log pipe", pipe, err)
	}
	held := 0
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == pipe {
			held++
		}
	}
	if held != 1 {
		t.Errorf("the agent holds %d descriptors of the job's log pipe, want 1 (the read end)", held)
	}
	b, _ := os.ReadFile(path)
	for _, want := range []string{"first run\n", "berth: exited pid ", "berth: restarting in ", "second run\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("log lacks %q:\n%s", want, b)
		}
	}
}
