package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/supervisor"
	"golang.org/x/sys/unix"
)

// counterJob is a connector "counter" whose job writes a numbered line
// ("n 1", "n 2", ...) every 10 ms: a log that shows any line lost or
// repeated (countLines).
const counterJob = `[[connector]]
name = "counter"
  [connector.run]
  command = ["/bin/sh", "-c", "i=0; while :; do i=$((i+1)); echo \"n $i\"; sleep 0.01; done"]
`

// countLines returns the numbers a counting job wrote to its log file, in
// order (lines "n <i>"; the agent's "berth: ..." lines are skipped).
func countLines(t testing.TB, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "n "); ok {
			if i, err := strconv.Atoi(n); err == nil {
				out = append(out, i)
			}
		}
	}
	return out
}

// handOverWorld starts an agent (session TTL 30 s) with three jobs: a
// sleeper, the counter (counterJob) and a quitter whose shell exits 7
// once its sleep is killed (restart on-failure); it returns them running
// and the counter's log file, once the counter has written.
func handOverWorld(t *testing.T) (*env, map[string]api.Job, string) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[cluster]
session_ttl = "30s"

[static]
connectors = ["sleeper", "counter", "quitter"]

[[connector]]
name = "sleeper"
  [connector.run]
  command = ["sleep", "1000"]

` + counterJob + `
[[connector]]
name = "quitter"
  [connector.run]
  command = ["/bin/sh", "-c", "sleep 1000 & wait; exit 7"]
  restart = "on-failure"
`)
	e.start()
	before := e.waitRunning("sleeper", "counter", "quitter")
	logFile := filepath.Join(e.dir, "log", "counter.log")
	testutil.Eventually(t, 30*time.Second, "the counter writes", func() bool { return len(countLines(t, logFile)) > 10 })
	return e, before, logFile
}

// Live restart, the crash: an agent killed with SIGKILL and started again
// hands its jobs over without a restart: the same pids, state running,
// restart count and start time kept, the counting job's log has every
// number once and in order, the session (lease) resumed; a job that
// exited while no agent ran is reported with its real exit status and
// handled by its restart policy; GET /v1/agent says what was adopted.
func TestCrashedAgentHandsJobsOver(t *testing.T) {
	e, before, logFile := handOverWorld(t)

	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	// While no agent runs, the quitter's main process ends with status 7.
	qpid := before["quitter"].PID
	if err := syscall.Kill(qpid, 0); err != nil {
		t.Fatalf("the quitter (pid %d) died with the agent: %v", qpid, err)
	}
	for _, id := range []string{"sleeper", "counter"} {
		if err := syscall.Kill(before[id].PID, 0); err != nil {
			t.Fatalf("%s (pid %d) died with the agent: %v", id, before[id].PID, err)
		}
	}
	killChildren(t, qpid) // its sleep ends; the shell exits 7
	// Reaped, not only a zombie: the guard records the exit as it reaps,
	// and a zombie listed to the next agent is a run that still runs.
	testutil.Eventually(t, 30*time.Second, "the guard reaps the quitter", func() bool {
		return syscall.Kill(qpid, 0) == syscall.ESRCH
	})
	// The condition itself: the guard has recorded the exit, and no agent
	// was connected to it then (the exit is not one the next agent sees
	// happen after its adoption).
	testutil.Eventually(t, 30*time.Second, "the guard's record of the quitter's exit while no agent is connected", func() bool {
		return quitterExitRe.MatchString(e.guardLog())
	})

	e.start() // a new e.out: the second agent's log
	after := e.waitRunning("sleeper", "counter", "quitter")
	// The quitter's adopted run shows running until its exit reaches the
	// worker (at once when the guard had recorded it at the listing, a
	// moment later when the guard reaped it after): awaited, its restart
	// being the proof that the exit was handled.
	testutil.Eventually(t, 30*time.Second, "the quitter restarted after its exit", func() bool {
		after = e.jobs()
		q := after["quitter"]
		return q.State == "running" && q.PID != 0 && q.PID != qpid
	})
	for _, id := range []string{"sleeper", "counter"} {
		b, a := before[id], after[id]
		if a.PID != b.PID {
			t.Errorf("%s: pid %d after the restart, %d before: restarted, not adopted", id, a.PID, b.PID)
		}
		if a.Restarts != b.Restarts {
			t.Errorf("%s: restarts %d after, %d before", id, a.Restarts, b.Restarts)
		}
		if a.StartedAt == nil || b.StartedAt == nil || !a.StartedAt.Equal(*b.StartedAt) {
			t.Errorf("%s: started_at %s after, %s before", id, a.StartedAt, b.StartedAt)
		}
		// The log says what happened: an adoption, not a start.
		second := e.out.String()
		if want := fmt.Sprintf(`msg="job adopted" job_id=%s pid=%d `, id, b.PID); !strings.Contains(second, want) {
			t.Errorf("%s: the second agent's log has no %q", id, want)
		}
		if strings.Contains(second, `msg="job starting" job_id=`+id+" ") {
			t.Errorf("%s: the second agent logged an adopted run as a start", id)
		}
	}
	q := after["quitter"]
	if q.LastExit == nil || q.LastExit.Code != 7 {
		t.Errorf("quitter: last exit %+v, want the status 7 it exited with while no agent ran", q.LastExit)
	}
	if q.Restarts != 1 {
		t.Errorf("quitter: restarts %d, want 1 (restart on-failure after its exit 7)", q.Restarts)
	}
	if !strings.Contains(e.out.String(), `msg="joined the cluster" resumed=true`) {
		t.Errorf("the second start did not resume the session")
	}
	var ag api.Agent
	getJSON(t, "http://"+e.addr+"/v1/agent", &ag)
	if ag.Adoption == nil || ag.Adoption.Held != 3 || ag.Adoption.Adopted != 3 {
		t.Errorf("GET /v1/agent adoption = %+v, want 3 held, 3 adopted", ag.Adoption)
	}
	// The counter's output goes on in the same file: no number lost, none twice.
	n0 := len(countLines(t, logFile))
	testutil.Eventually(t, 30*time.Second, "the counter writes on", func() bool { return len(countLines(t, logFile)) > n0+10 })
	ns := countLines(t, logFile)
	for i, n := range ns {
		if n != i+1 {
			t.Fatalf("counter log: line %d says %d: lines lost or repeated across the restart", i+1, n)
		}
	}

	// A clean stop still stops every job and leaves nothing.
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	for _, id := range []string{"sleeper", "counter"} {
		if testutil.Alive(before[id].PID) {
			t.Errorf("%s (pid %d) still runs after a clean stop", id, before[id].PID)
		}
	}
}

// quitterExitRe is the guard's log line of the quitter's exit 7 while no
// agent is connected.
var quitterExitRe = regexp.MustCompile(`a run exited while no agent is connected.* job_id=quitter .*exited=true code=7`)

// killChildren kills the children of pid (a job's shell).
func killChildren(t *testing.T, pid int) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		t.Fatalf("children of %d: %v", pid, err)
	}
	for _, f := range strings.Fields(string(b)) {
		c, _ := strconv.Atoi(f)
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
}

// Live restart, the upgrade: berth upgrade hands every job to the program
// installed at the agent's path (the same pid for the agent, the same
// pids for the jobs, the same session); a program there that does not run
// is refused and the agent goes on as before.
func TestUpgradeHandsJobsOver(t *testing.T) {
	e := newEnv(t)
	e.bin = filepath.Join(e.dir, "berth")
	copyFile(t, berthBin, e.bin)
	e.write(e.header("2s") + `
[cluster]
session_ttl = "30s"

[static]
connectors = ["sleeper", "counter"]

[[connector]]
name = "sleeper"
  [connector.run]
  command = ["sleep", "1000"]

` + counterJob)
	e.start()
	before := e.waitRunning("sleeper", "counter")
	var ag0 api.Agent
	getJSON(t, "http://"+e.addr+"/v1/agent", &ag0)

	// A broken program at the agent's path: refused, nothing changes.
	if err := os.WriteFile(e.bin+".new", []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.bin, e.bin+".good"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.bin+".new", e.bin); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(berthBin, "upgrade", "--config", e.config, "--timeout", "5s").CombinedOutput()
	if err == nil {
		t.Fatalf("berth upgrade to a program that does not run succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "does not run") {
		t.Errorf("berth upgrade does not say why the hand-over was refused:\n%s", out)
	}
	testutil.Eventually(t, 30*time.Second, "the agent logs the refusal", func() bool {
		return strings.Contains(e.out.String(), "hand-over refused")
	})
	for id, j := range e.jobs() {
		if j.PID != before[id].PID {
			t.Errorf("%s: pid %d after a refused hand-over, %d before", id, j.PID, before[id].PID)
		}
	}

	// The real program back (as a package upgrade renames its file in):
	// the hand-over.
	if err := os.Rename(e.bin+".good", e.bin); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(berthBin, "upgrade", "--config", e.config).CombinedOutput()
	if err != nil {
		t.Fatalf("berth upgrade: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "2 of 2 runs adopted") {
		t.Errorf("berth upgrade printed:\n%s", out)
	}
	var ag api.Agent
	getJSON(t, "http://"+e.addr+"/v1/agent", &ag)
	if ag.PID != ag0.PID || ag.PID != e.cmd.Process.Pid {
		t.Errorf("agent pid %d after the hand-over, %d before (process %d)", ag.PID, ag0.PID, e.cmd.Process.Pid)
	}
	if !ag.ImageStarted.After(ag0.ImageStarted) {
		t.Errorf("image_started %s, before %s: no new image", ag.ImageStarted, ag0.ImageStarted)
	}
	after := e.waitRunning("sleeper", "counter")
	for id, b := range before {
		if after[id].PID != b.PID {
			t.Errorf("%s: pid %d after the hand-over, %d before", id, after[id].PID, b.PID)
		}
	}
	if !strings.Contains(e.out.String(), `msg="joined the cluster" resumed=true`) {
		t.Errorf("the new image did not resume the session")
	}
	logFile := filepath.Join(e.dir, "log", "counter.log")
	n0 := len(countLines(t, logFile))
	testutil.Eventually(t, 30*time.Second, "the counter writes on", func() bool { return len(countLines(t, logFile)) > n0+10 })
	for i, n := range countLines(t, logFile) {
		if n != i+1 {
			t.Fatalf("counter log: line %d says %d: lines lost or repeated across the hand-over", i+1, n)
		}
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop after the hand-over: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// The lease guard killed while its agent runs: the jobs' main processes
// die with their parent (parent-death signal), the agent counts each as
// an exit (SIGKILL), kills what is left of the job and restarts it by its
// policy through a new guard; nothing is left unwatched.
func TestGuardKilledJobsRestarted(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["sleeper"]

[[connector]]
name = "sleeper"
  [connector.run]
  command = ["/bin/sh", "-c", "sleep 1000 & exec sleep 1000"]
  restart = "always"
`)
	e.start()
	before := e.waitRunning("sleeper")["sleeper"]
	guards := e.guardPids()
	if len(guards) != 1 {
		t.Fatalf("processes in the guard's cgroup: %v, want one", guards)
	}
	if err := syscall.Kill(guards[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var after api.Job
	testutil.Eventually(t, 60*time.Second, "the job restarted with a new pid", func() bool {
		after = e.jobs()["sleeper"]
		return after.State == "running" && after.PID != before.PID && after.Restarts == before.Restarts+1
	})
	if after.LastExit == nil || after.LastExit.Signal != "SIGKILL" {
		t.Errorf("last exit %+v, want SIGKILL (the guard, its parent, died)", after.LastExit)
	}
	var procs []int
	for _, d := range e.cgroupDirs() {
		procs = append(procs, testutil.ProcsUnder(filepath.Join(d, "jobs", "sleeper"))...)
	}
	if n := len(uniq(procs)); n != 2 {
		t.Errorf("the job's cgroup holds %d processes (%v), want the new run's 2: the old run's fork was not killed", n, uniq(procs))
	}
	if !strings.Contains(e.out.String(), "lease guard reconnected") && !strings.Contains(e.out.String(), "lease guard connected") {
		t.Errorf("no new guard connected:\n%s", e.out)
	}
}

// Runs an agent cannot adopt: a job whose command changed while no agent
// ran is killed and started anew (a new pid, the new command); a job no
// longer in the agent's file (deleted from the store: no claim covers it)
// is killed once the first reconcile is done, and the log names it.
func TestRestartWithChangedFileAdoptsOnlyWhatMatches(t *testing.T) {
	e := newEnv(t)
	conf := func(cmd string, extra bool) string {
		c := e.header("2s") + `
[cluster]
session_ttl = "30s"

[static]

[[connector]]
name = "kept"
  [connector.run]
  command = ["sleep", "1000"]

[[connector]]
name = "changed"
  [connector.run]
  command = ["sleep", "` + cmd + `"]
`
		if extra {
			c += `
[[connector]]
name = "dropped"
  [connector.run]
  command = ["sleep", "1000"]
`
		}
		return c
	}
	e.write(conf("1000", true))
	e.start()
	before := e.waitRunning("kept", "changed", "dropped")
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.write(conf("2000", false))
	e.start()
	after := e.waitRunning("kept", "changed")
	if after["kept"].PID != before["kept"].PID {
		t.Errorf("kept: pid %d, was %d: not adopted", after["kept"].PID, before["kept"].PID)
	}
	if after["changed"].PID == before["changed"].PID {
		t.Errorf("changed: adopted pid %d although its command changed", before["changed"].PID)
	}
	testutil.Eventually(t, 30*time.Second, "the runs of changed and dropped are dead", func() bool {
		return !testutil.Alive(before["changed"].PID) && !testutil.Alive(before["dropped"].PID)
	})
	if !strings.Contains(e.out.String(), `msg="killed a run of an earlier agent that no claim of this one covers" job_id=dropped`) {
		t.Errorf("the run of dropped was not logged as killed:\n%s", e.out)
	}
	var ag api.Agent
	getJSON(t, "http://"+e.addr+"/v1/agent", &ag)
	if ag.Adoption == nil || ag.Adoption.Held != 3 || ag.Adoption.Adopted != 1 {
		t.Errorf("adoption %+v, want 3 held, 1 adopted", ag.Adoption)
	}
	// Crashes with no further edit: the guard holds one run per job (the
	// runs that were not adopted were forgotten), and both jobs are
	// adopted every time.
	for round := 0; round < 3; round++ {
		if err := e.stop(syscall.SIGKILL); err == nil {
			t.Fatal("agent killed by SIGKILL reported success")
		}
		e.start()
		again := e.waitRunning("kept", "changed")
		for _, id := range []string{"kept", "changed"} {
			if again[id].PID != after[id].PID {
				t.Errorf("round %d: %s has pid %d, was %d: not adopted", round, id, again[id].PID, after[id].PID)
			}
		}
		getJSON(t, "http://"+e.addr+"/v1/agent", &ag)
		if ag.Adoption == nil || ag.Adoption.Held != 2 || ag.Adoption.Adopted != 2 {
			t.Errorf("round %d: adoption %+v, want 2 held, 2 adopted", round, ag.Adoption)
		}
	}
}

// guardConnFD finds the descriptor of agent pid's one connection to its
// guard (dataDir/guard.sock): of the agent's socket descriptors
// (/proc/PID/fd), the one whose peer is bound to that path
// (getpeername(2) on a copy taken with pidfd_getfd(2)). It fails the
// test unless there is exactly one, and none to another socket of the
// data_dir.
func guardConnFD(t *testing.T, pid int, dataDir string) int {
	t.Helper()
	sock := filepath.Join(dataDir, "guard.sock")
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(pfd)
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, ent := range ents {
		l, err := os.Readlink(filepath.Join(dir, ent.Name()))
		if err != nil || !strings.HasPrefix(l, "socket:[") {
			continue
		}
		fd, _ := strconv.Atoi(ent.Name())
		cp, err := unix.PidfdGetfd(pfd, fd, 0)
		if err != nil {
			continue // closed meanwhile
		}
		peer, err := unix.Getpeername(cp)
		unix.Close(cp)
		u, ok := peer.(*unix.SockaddrUnix)
		if err != nil || !ok {
			continue
		}
		if u.Name == sock {
			found = append(found, fd)
		} else if filepath.Dir(u.Name) == dataDir {
			t.Errorf("agent %d's descriptor %d is connected to %s: a second socket to the guard", pid, fd, u.Name)
		}
	}
	if len(found) != 1 {
		t.Fatalf("agent %d's descriptors connected to %s: %v, want one", pid, sock, found)
	}
	return found[0]
}

// shutdownFD shuts down the socket behind descriptor fd of process pid
// (a copy taken with pidfd_getfd(2): the socket is the same, so both ends
// of its connection see it end), as a transport error would.
func shutdownFD(t *testing.T, pid, fd int) {
	t.Helper()
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(pfd)
	cp, err := unix.PidfdGetfd(pfd, fd, 0)
	if err != nil {
		t.Fatalf("pidfd_getfd %d/%d: %v", pid, fd, err)
	}
	defer unix.Close(cp)
	if err := unix.Shutdown(cp, unix.SHUT_RDWR); err != nil {
		t.Fatalf("shutdown the agent's connection to its guard: %v", err)
	}
}

// Live restart, the connection: the agent's one connection to a guard
// that lives on breaks (here shut down from outside while the agent is
// stopped, so that a job's exit surely falls in the gap). The agent
// connects again and lists the runs: no job restarts
// (the same pids, restart counts 0, the counter's log without a gap),
// and the job that exited meanwhile is reported with its real status (7)
// and restarted by its policy, not as a SIGKILL of a lost run.
func TestGuardConnectionBreakKeepsJobs(t *testing.T) {
	e, before, logFile := handOverWorld(t)
	apid := e.cmd.Process.Pid
	fd := guardConnFD(t, apid, filepath.Join(e.dir, "data"))

	testutil.Stop(t, apid)
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(apid, syscall.SIGCONT)
		}
	}()
	shutdownFD(t, apid, fd)
	qpid := before["quitter"].PID
	killChildren(t, qpid) // its sleep ends; the shell exits 7, reaped by the guard
	testutil.Eventually(t, 30*time.Second, "the guard reaps the quitter", func() bool { return syscall.Kill(qpid, 0) == syscall.ESRCH })
	if err := syscall.Kill(apid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false

	testutil.Eventually(t, 60*time.Second, "the agent lists the runs again", func() bool {
		return strings.Contains(e.out.String(), `msg="runs re-attached after the connection to the lease guard ended"`)
	})
	if !regexp.MustCompile(`msg="runs re-attached after the connection to the lease guard ended" guard_pid=\d+ running=2 exited=1 lost=0`).MatchString(e.out.String()) {
		t.Errorf("the relist did not find 2 runs running, 1 exited, none lost:\n%s", e.out)
	}
	var q api.Job
	testutil.Eventually(t, 60*time.Second, "the quitter restarted after its exit 7", func() bool {
		q = e.jobs()["quitter"]
		return q.State == "running" && q.PID != qpid && q.Restarts == 1
	})
	if q.LastExit == nil || q.LastExit.Code != 7 {
		t.Errorf("quitter: last exit %+v, want the status 7 it exited with while the connection was down", q.LastExit)
	}
	after := e.jobs()
	for _, id := range []string{"sleeper", "counter"} {
		b, a := before[id], after[id]
		if a.State != "running" || a.PID != b.PID || a.Restarts != b.Restarts {
			t.Errorf("%s: %s pid %d restarts %d, was pid %d restarts %d: restarted by the broken connection", id, a.State, a.PID, a.Restarts, b.PID, b.Restarts)
		}
	}
	// The connection works again: the restarted quitter went through it,
	// and the counter's output goes on with no number lost.
	n0 := len(countLines(t, logFile))
	testutil.Eventually(t, 30*time.Second, "the counter writes on", func() bool { return len(countLines(t, logFile)) > n0+10 })
	for i, n := range countLines(t, logFile) {
		if n != i+1 {
			t.Fatalf("counter log: line %d says %d: lines lost or repeated", i+1, n)
		}
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
}

// Live restart, a job waiting to restart: a crash-looping job in backoff
// (no run) when the agent is SIGKILLed keeps its restart count and its
// backoff under the next agent: it waits out the rest of the delay (the
// same next_restart) instead of starting anew at once with a count of 0,
// then goes on crash-looping from that count. A clean stop leaves no wait
// behind.
func TestCrashedAgentKeepsBackoff(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[cluster]
session_ttl = "30s"

[static]
connectors = ["sleeper", "crasher"]

[[connector]]
name = "sleeper"
  [connector.run]
  command = ["sleep", "1000"]

[[connector]]
name = "crasher"
  [connector.run]
  command = ["/bin/sh", "-c", "exit 3"]
  restart = "always"
`)
	e.start()
	// Backoff 1 s, 2 s, 4 s: after its third restart the crasher waits 8 s.
	var before api.Job
	testutil.Eventually(t, 120*time.Second, "the crasher backs off after its third restart", func() bool {
		before = e.jobs()["crasher"]
		return before.State == "backoff" && before.Restarts == 3 && before.NextRestart != nil
	})
	// The agent saves the wait from a goroutine of its own, just after
	// the worker entered it: the kill comes once it is on disk.
	testutil.Eventually(t, 30*time.Second, "the agent has saved the crasher's wait", func() bool {
		var saved struct {
			Jobs []struct {
				JobID    string `json:"job_id"`
				Restarts int    `json:"restarts"`
			} `json:"jobs"`
		}
		b, err := os.ReadFile(filepath.Join(e.dir, "data", "backoff"))
		if err != nil || json.Unmarshal(b, &saved) != nil {
			return false
		}
		return len(saved.Jobs) == 1 && saved.Jobs[0].JobID == "crasher" && saved.Jobs[0].Restarts == before.Restarts
	})
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.start()
	var first api.Job
	testutil.Eventually(t, 60*time.Second, "the crasher's worker has begun", func() bool {
		first = e.jobs()["crasher"]
		return first.State != "starting"
	})
	if first.Restarts < before.Restarts {
		t.Errorf("crasher: restarts %d under the new agent, %d before: the count started anew", first.Restarts, before.Restarts)
	}
	if first.State == "backoff" && first.Restarts == before.Restarts {
		// Still waiting: for the same restart, due at the same time
		// (saved as CLOCK_BOOTTIME, converted back on load).
		if first.NextRestart == nil || first.NextRestart.Sub(*before.NextRestart).Abs() > time.Second {
			t.Errorf("crasher: next restart %v under the new agent, %v before", first.NextRestart, before.NextRestart)
		}
	}
	logFile := filepath.Join(e.dir, "log", "crasher.log")
	testutil.Eventually(t, 60*time.Second, "the crasher's log says it carried the backoff on", func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), "the backoff of an earlier agent (3 restarts so far)")
	})
	// It goes on from its count: the fourth restart, then the fifth.
	var after api.Job
	testutil.Eventually(t, 120*time.Second, "the crasher restarts on from its count", func() bool {
		after = e.jobs()["crasher"]
		return after.Restarts >= before.Restarts+1
	})
	if after.LastExit == nil || after.LastExit.Code != 3 {
		t.Errorf("crasher: last exit %+v, want code 3", after.LastExit)
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "data", "backoff")); !os.IsNotExist(err) {
		t.Errorf("a clean stop left the backoff record: %v", err)
	}
}

// jobLimit reads the first of files that exists in job's cgroup in any
// hierarchy of e's root (pids.max, memory.max, memory.limit_in_bytes),
// trimmed; "" when none does.
func (e *env) jobLimit(job string, files ...string) string {
	for _, d := range e.cgroupDirs() {
		for _, f := range files {
			if b, err := os.ReadFile(filepath.Join(d, "jobs", job, f)); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
	}
	return ""
}

// Live restart, limits edited while no agent ran: the limits are not part
// of a run's command fingerprint, so the next agent adopts the run (the
// same pid, no restart) and writes the new limits into its cgroup in
// place, as a reload does.
func TestLimitsChangedWhileNoAgentRanApplyToAdoptedRun(t *testing.T) {
	e := newEnv(t)
	conf := func(pids int, memory string) string {
		return e.header("2s") + fmt.Sprintf(`
[cluster]
session_ttl = "30s"

[static]
connectors = ["limited"]

[[connector]]
name = "limited"
  [connector.run]
  command = ["sleep", "1000"]
  [connector.run.limits]
  pids = %d
  memory = %q
`, pids, memory)
	}
	e.write(conf(100, "64MiB"))
	e.start()
	before := e.waitRunning("limited")["limited"]
	if got := e.jobLimit("limited", "pids.max"); got != "100" {
		t.Fatalf("pids.max %q, want 100", got)
	}
	if got := e.jobLimit("limited", "memory.max", "memory.limit_in_bytes"); got != strconv.Itoa(64<<20) {
		t.Fatalf("memory limit %q, want %d", got, 64<<20)
	}
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.write(conf(50, "32MiB"))
	e.start()
	after := e.waitRunning("limited")["limited"]
	e.waitLimitsChecked()
	if after.PID != before.PID || after.Restarts != before.Restarts {
		t.Errorf("limited: pid %d restarts %d, was pid %d restarts %d: restarted, not adopted", after.PID, after.Restarts, before.PID, before.Restarts)
	}
	if got := e.jobLimit("limited", "pids.max"); got != "50" {
		t.Errorf("pids.max of the adopted run %q, want the new 50", got)
	}
	if got := e.jobLimit("limited", "memory.max", "memory.limit_in_bytes"); got != strconv.Itoa(32<<20) {
		t.Errorf("memory limit of the adopted run %q, want the new %d", got, 32<<20)
	}
	if !strings.Contains(e.out.String(), "adopted the runs of an earlier agent") {
		t.Errorf("the second agent did not adopt:\n%s", e.out)
	}
}

// Live restart, limits removed while no agent ran: the next agent adopts
// the run (the same pid) and writes the kernel's default for every limit
// the file no longer sets into the run's cgroup (limits.Defaults), so the
// adopted run is as unlimited as a run started under the new file: pids.max
// and the memory limit read max, the CPU quota none, the CPU weight the
// default.
func TestLimitsRemovedWhileNoAgentRanAreLiftedFromAdoptedRun(t *testing.T) {
	e := newEnv(t)
	conf := func(limits string) string {
		return e.header("2s") + `
[cluster]
session_ttl = "30s"

[static]
connectors = ["limited"]

[[connector]]
name = "limited"
  [connector.run]
  command = ["sleep", "1000"]
` + limits
	}
	// An io limit too, where /var/tmp is on a block device.
	ioLimit, ioKey := "", ""
	if d, err := limits.ResolveDevice("/var/tmp"); err == nil {
		ioLimit = "  [[connector.run.limits.io]]\n  device = \"/var/tmp\"\n  read_bps = \"1MiB\"\n"
		ioKey = fmt.Sprintf("%d:%d", d.Major, d.Minor)
	} else {
		t.Logf("no io limit: /var/tmp: %v", err)
	}
	e.write(conf(`  [connector.run.limits]
  pids = 100
  memory = "64MiB"
  cpu = 0.5
  cpu_weight = 300
` + ioLimit))
	e.start()
	before := e.waitRunning("limited")["limited"]
	// The device's read_bps: v2 io.max "MAJ:MIN rbps=N ...", v1 "MAJ:MIN N".
	readBps := func() string {
		for _, line := range strings.Split(e.jobLimit("limited", "io.max", "blkio.throttle.read_bps_device"), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == ioKey {
				if strings.HasPrefix(f[1], "rbps=") {
					return strings.TrimPrefix(f[1], "rbps=")
				}
				return f[1]
			}
		}
		return "none"
	}
	if ioKey != "" {
		if got := readBps(); got != strconv.Itoa(1<<20) {
			t.Fatalf("read_bps of %s %q, want %d", ioKey, got, 1<<20)
		}
	}
	if got := e.jobLimit("limited", "pids.max"); got != "100" {
		t.Fatalf("pids.max %q, want 100", got)
	}
	if got := e.jobLimit("limited", "memory.max", "memory.limit_in_bytes"); got != strconv.Itoa(64<<20) {
		t.Fatalf("memory limit %q, want %d", got, 64<<20)
	}
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.write(conf(""))
	e.start()
	after := e.waitRunning("limited")["limited"]
	e.waitLimitsChecked()
	if after.PID != before.PID || after.Restarts != before.Restarts {
		t.Errorf("limited: pid %d restarts %d, was pid %d restarts %d: restarted, not adopted", after.PID, after.Restarts, before.PID, before.Restarts)
	}
	if !strings.Contains(e.out.String(), "adopted the runs of an earlier agent") {
		t.Errorf("the second agent did not adopt:\n%s", e.out)
	}
	if got := e.jobLimit("limited", "pids.max"); got != "max" {
		t.Errorf("pids.max of the adopted run %q, want max", got)
	}
	mem := e.jobLimit("limited", "memory.max", "memory.limit_in_bytes")
	if n, err := strconv.ParseUint(mem, 10, 64); mem != "max" && (err != nil || n < 1<<62) {
		t.Errorf("memory limit of the adopted run %q, want max (v1: PAGE_COUNTER_MAX pages)", mem)
	}
	if got := e.jobLimit("limited", "cpu.max", "cpu.cfs_quota_us"); got != "max 100000" && got != "-1" {
		t.Errorf("CPU quota of the adopted run %q, want max (v1: -1)", got)
	}
	if got := e.jobLimit("limited", "cpu.weight", "cpu.shares"); got != "100" && got != "1024" {
		t.Errorf("CPU weight of the adopted run %q, want the default (v2 100, v1 shares 1024)", got)
	}
	if got := readBps(); ioKey != "" && got != "none" && got != "max" {
		t.Errorf("read_bps of %s of the adopted run %q, want none (v2 max)", ioKey, got)
	}
}

// The same for a sharing group: its limits removed while no agent ran are
// lifted from its cgroup, which holds the adopted run of its job.
func TestGroupLimitsRemovedWhileNoAgentRanAreLiftedFromAdoptedRun(t *testing.T) {
	e := newEnv(t)
	conf := func(limits string) string {
		return e.header("2s") + `
[cluster]
session_ttl = "30s"

[static]
connectors = ["member"]

[[group]]
name = "shared"
` + limits + `
[[connector]]
name = "member"
group = "shared"
  [connector.run]
  command = ["sleep", "1000"]
`
	}
	groupLimit := func(files ...string) string {
		for _, d := range e.cgroupDirs() {
			for _, f := range files {
				if b, err := os.ReadFile(filepath.Join(d, "groups", "shared", f)); err == nil {
					return strings.TrimSpace(string(b))
				}
			}
		}
		return ""
	}
	e.write(conf(`limits = { pids = 100, memory = "128MiB" }`))
	e.start()
	before := e.waitRunning("member")["member"]
	if got := groupLimit("pids.max"); got != "100" {
		t.Fatalf("group pids.max %q, want 100", got)
	}
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.write(conf(""))
	e.start()
	after := e.waitRunning("member")["member"]
	if after.PID != before.PID {
		t.Errorf("member: pid %d, was %d: restarted, not adopted", after.PID, before.PID)
	}
	if got := groupLimit("pids.max"); got != "max" {
		t.Errorf("group pids.max %q after the limit was removed, want max", got)
	}
	mem := groupLimit("memory.max", "memory.limit_in_bytes")
	if n, err := strconv.ParseUint(mem, 10, 64); mem != "max" && (err != nil || n < 1<<62) {
		t.Errorf("group memory limit %q after the limit was removed, want max", mem)
	}
}

// waitLimitsChecked waits until e's agent has logged that the limits of
// the runs it adopted are checked against their definitions and in force
// (an adoption reports the runs first, then checks their limits).
func (e *env) waitLimitsChecked() {
	e.t.Helper()
	testutil.Eventually(e.t, 60*time.Second, "the adopted jobs' limits checked", func() bool {
		return strings.Contains(e.out.String(), supervisor.SettledLine)
	})
}

// Live restart, a limit the kernel refuses for the adopted run: the
// memory limit was lowered below what the job uses while no agent ran
// (cgroup v1 refuses such a memory.limit_in_bytes with EBUSY once reclaim
// cannot bring the usage under it, with no swap). The run is adopted and
// keeps running under the earlier agent's limits; the refusal is
// reported (update_blocked) and logged, and a reload with a limit the
// kernel accepts puts it in force and clears the report.
func TestAdoptedRunKeepsRunningWhenTheKernelRefusesItsNewLimit(t *testing.T) {
	if cgroup.DetectMode() == cgroup.Unified || cgroup.DetectMode() == cgroup.Unavailable {
		t.Skip("needs the cgroup v1 memory controller: cgroup v2 takes a memory.max below the usage (it reclaims, then OOM-kills) instead of refusing it")
	}
	if b, err := os.ReadFile("/proc/swaps"); err != nil || strings.Count(string(b), "\n") > 1 {
		t.Skip("needs a host without swap: with swap the kernel swaps the job's memory out and takes the lower limit")
	}
	e := newEnv(t)
	conf := func(memory string) string {
		return e.header("2s") + fmt.Sprintf(`
[cluster]
session_ttl = "30s"

[static]
connectors = ["holder"]

[[connector]]
name = "holder"
  [connector.run]
  command = ["/bin/sh", "-c", "x=$(head -c 50000000 /dev/zero | tr '\\000' a); sleep 1000"]
  [connector.run.limits]
  memory = %q
`, memory)
	}
	e.write(conf("256MiB"))
	e.start()
	before := e.waitRunning("holder")["holder"]
	testutil.Eventually(t, 30*time.Second, "the job holding 50 MB", func() bool {
		n, err := strconv.ParseUint(e.jobLimit("holder", "memory.current", "memory.usage_in_bytes"), 10, 64)
		return err == nil && n >= 48<<20
	})
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.write(conf("16MiB"))
	e.start()
	e.waitLimitsChecked()
	testutil.Eventually(t, 30*time.Second, "the refused limit reported", func() bool {
		return strings.Contains(e.jobs()["holder"].UpdateBlocked, strconv.Itoa(16<<20))
	})
	after := e.jobs()["holder"]
	if after.State != "running" || after.PID != before.PID {
		t.Errorf("holder: %s pid %d, was running pid %d: the run was not kept", after.State, after.PID, before.PID)
	}
	if got := e.jobLimit("holder", "memory.max", "memory.limit_in_bytes"); got != strconv.Itoa(256<<20) {
		t.Errorf("memory limit %q, want the earlier agent's %d kept", got, 256<<20)
	}
	if !strings.Contains(e.out.String(), "the kernel refused limits of an adopted job") {
		t.Errorf("no log line for the refusal:\n%s", e.out)
	}
	e.write(conf("128MiB"))
	if err := e.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the accepted limit in force, the report cleared", func() bool {
		return e.jobLimit("holder", "memory.max", "memory.limit_in_bytes") == strconv.Itoa(128<<20) && e.jobs()["holder"].UpdateBlocked == ""
	})
	if j := e.jobs()["holder"]; j.PID != before.PID {
		t.Errorf("holder: pid %d after the reload, was %d", j.PID, before.PID)
	}
}
