package test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// guardJob is a job whose main process forks a process into a session of
// its own: the fork outlives the agent's death unless something kills it.
const guardJob = `
[cluster]
session_ttl = "2s"

[static]
connectors = ["orphan"]

[[connector]]
name = "orphan"
  [connector.run]
  command = ["/bin/sh", "-c", "setsid sleep 1000 & exec sleep 1000"]
`

// jobProcs waits until the job "orphan" runs with its fork and returns
// its processes (main first).
func (e *env) jobProcs() []int {
	e.t.Helper()
	main := e.waitRunning("orphan")["orphan"].PID
	var all []int
	testutil.Eventually(e.t, 20*time.Second, "both sleeps in the job's cgroup", func() bool {
		all = nil
		for _, d := range e.cgroupDirs() {
			all = append(all, testutil.ProcsUnder(filepath.Join(d, "jobs", "orphan"))...)
		}
		all = uniq(all)
		return len(all) == 2
	})
	if all[0] != main {
		all[0], all[1] = all[1], all[0]
	}
	return all
}

// guardPids lists the processes in the guard's leaf, <root>/guard.
func (e *env) guardPids() []int {
	var pids []int
	for _, p := range e.guardLeafPids() {
		if !isJobsInit(p) {
			pids = append(pids, p)
		}
	}
	return pids
}

// guardLeafPids is every process in the guard's cgroup leaf: the guard and
// the init of its jobs' PID namespace (`berth jobs-init`).
func (e *env) guardLeafPids() []int {
	var pids []int
	for _, d := range e.cgroupDirs() {
		pids = append(pids, testutil.ProcsUnder(filepath.Join(d, "guard"))...)
	}
	return uniq(pids)
}

// isJobsInit reports whether pid runs `berth jobs-init`.
func isJobsInit(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && slices.Contains(strings.Split(string(b), "\x00"), "jobs-init")
}

// guardLog is the guard's log, <data_dir>/guard.log.
func (e *env) guardLog() string {
	b, _ := os.ReadFile(filepath.Join(e.dir, "data", "guard.log"))
	return string(b)
}

// lateRe finds how late after the deadline the guard killed.
var lateRe = regexp.MustCompile(`the fencing deadline passed.* late=(\S+)`)

// checkGuardKilled waits until every process of procs is dead and the
// guard has exited, and checks from the guard's log that it killed less
// than half the fencing margin (0.5 s with session_ttl 2 s) after the
// deadline it holds, which is half a margin after the agent's own: before
// the store could expire the lease and another member start the job.
func (e *env) checkGuardKilled(procs, guards []int) {
	e.t.Helper()
	testutil.Eventually(e.t, 60*time.Second, "every process of the job dead", func() bool {
		for _, p := range procs {
			if testutil.Alive(p) {
				return false
			}
		}
		return true
	})
	testutil.Eventually(e.t, 60*time.Second, "the guard exited", func() bool {
		for _, p := range guards {
			if testutil.Alive(p) {
				return false
			}
		}
		return true
	})
	m := lateRe.FindStringSubmatch(e.guardLog())
	if m == nil {
		e.t.Fatalf("guard log has no kill at the deadline:\n%s", e.guardLog())
	}
	late, err := time.ParseDuration(m[1])
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("guard killed %s after the fencing deadline", late)
	if late >= 500*time.Millisecond {
		e.t.Errorf("guard killed %s after its deadline: at or after the lease's earliest expiry (half the 1 s margin is left)", late)
	}
	if e.jobCgroupExists("jobs/orphan") {
		e.t.Errorf("job cgroup jobs/orphan left after the guard's kill")
	}
}

// SIGKILL of the agent, which is not restarted: the guard kills every
// process of the job (the fork in its own session too) at the fencing
// deadline, and exits.
func TestGuardKillsJobsOfKilledAgent(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + guardJob)
	e.start()
	procs := e.jobProcs()
	guards := e.guardPids()
	if len(guards) != 1 {
		t.Fatalf("processes in the guard's cgroup: %v, want one", guards)
	}
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.checkGuardKilled(procs, guards)
}

// SIGSTOP of the agent: it sends no deadline, the guard kills every
// process of the job (its main process too, whose agent still lives) at
// the deadline. Once continued, the agent finds its session lost, joins
// again, starts the job again and a new guard; its clean stop leaves no
// guard running.
func TestGuardKillsJobsOfHungAgent(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + guardJob)
	e.start()
	procs := e.jobProcs()
	guards := e.guardPids()
	if len(guards) != 1 {
		t.Fatalf("processes in the guard's cgroup: %v, want one", guards)
	}
	if err := e.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	defer func() {
		if !continued {
			_ = e.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	e.checkGuardKilled(procs, guards)
	if err := e.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	continued = true
	again := e.jobProcs()
	if again[0] == procs[0] {
		t.Fatalf("job runs as pid %d again after the guard's kill", again[0])
	}
	var next []int
	testutil.Eventually(t, 30*time.Second, "a new guard", func() bool {
		next = e.guardPids()
		return len(next) == 1 && next[0] != guards[0]
	})
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, e.out)
	}
	for _, p := range append(next, again...) {
		if testutil.Alive(p) {
			t.Errorf("process %d alive after the agent's clean stop", p)
		}
	}
	if !strings.Contains(e.guardLog(), "released by the agent") {
		t.Errorf("guard log has no release:\n%s", e.guardLog())
	}
	if d := e.cgroupDirs(); len(d) > 0 {
		t.Errorf("cgroup root left after a clean stop: %v", d)
	}
}

// rollup reads the kB fields of /proc/PID/smaps_rollup.
func rollup(t *testing.T, pid int) map[string]int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "kB" {
			n, _ := strconv.Atoi(f[1])
			out[strings.TrimSuffix(f[0], ":")] = n
		}
	}
	return out
}

// The guard of an idle agent keeps at most 8 MiB of anonymous memory
// resident (its budget), its jobs namespace's init at most 6 MiB; their
// file-backed pages are the berth binary's, shared with the agent. The
// figures are logged.
func TestGuardMemory(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + guardJob)
	e.start()
	e.jobProcs()
	guards := e.guardPids()
	if len(guards) != 1 {
		t.Fatalf("processes in the guard's cgroup: %v, want one", guards)
	}
	m := rollup(t, guards[0])
	t.Logf("guard pid %d: Rss %d kB, Pss %d kB, Anonymous %d kB, Pss_Anon %d kB, Pss_File %d kB",
		guards[0], m["Rss"], m["Pss"], m["Anonymous"], m["Pss_Anon"], m["Pss_File"])
	if m["Anonymous"] == 0 || m["Anonymous"] > 8<<10 {
		t.Errorf("guard's anonymous resident memory %d kB, want at most 8 MiB", m["Anonymous"])
	}
	// The init of its jobs' PID namespace, one per guard whatever the
	// number of jobs (it holds nothing per job): at most 6 MiB of its own.
	for _, p := range e.guardLeafPids() {
		if !isJobsInit(p) {
			continue
		}
		m := rollup(t, p)
		t.Logf("jobs-init pid %d: Rss %d kB, Pss %d kB, Anonymous %d kB, Pss_Anon %d kB, Pss_File %d kB",
			p, m["Rss"], m["Pss"], m["Anonymous"], m["Pss_Anon"], m["Pss_File"])
		if m["Anonymous"] == 0 || m["Anonymous"] > 6<<10 {
			t.Errorf("jobs-init's anonymous resident memory %d kB, want at most 6 MiB", m["Anonymous"])
		}
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
}
