package test

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// C1 (nomad#5593): SIGKILL of the agent and of its lease guard (the
// jobs' parent, which would otherwise hold them for the next agent: see
// TestCrashedAgentHandsJobsOver), then a second start. Between the two,
// every process of the job is gone, the fork that escaped into its own
// session too: the kernel kills the guard's jobs PID namespace with the
// guard (C38, TestC38JobsDieWithTheirGuard); the second start runs the
// job anew and no process of the first run is alive.
func TestOrphansKilledAfterAgentSIGKILL(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["orphan"]

[[connector]]
name = "orphan"
  [connector.run]
  command = ["/bin/sh", "-c", "setsid sleep 1000 & exec sleep 1000"]
`)
	e.start()
	main := e.waitRunning("orphan")["orphan"].PID
	var first []int
	testutil.Eventually(t, 10*time.Second, "both sleeps in the job's cgroup", func() bool {
		first = nil
		for _, d := range e.cgroupDirs() {
			first = append(first, testutil.ProcsUnder(filepath.Join(d, "jobs", "orphan"))...)
		}
		return len(uniq(first)) >= 2
	})
	first = uniq(first)
	var forked []int
	for _, pid := range first {
		if pid != main {
			forked = append(forked, pid)
		}
	}
	if len(forked) != 1 {
		t.Fatalf("job processes %v, main %d: want exactly one forked child", first, main)
	}
	guards := e.guardPids()
	if len(guards) != 1 {
		t.Fatalf("processes in the guard's cgroup: %v, want one", guards)
	}
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	if err := syscall.Kill(guards[0], syscall.SIGKILL); err != nil {
		t.Fatalf("kill the lease guard %d: %v", guards[0], err)
	}
	testutil.Eventually(t, 10*time.Second, "every process of the job gone after the guard's SIGKILL", func() bool {
		return !testutil.Alive(main) && !testutil.Alive(forked[0])
	})
	e.start()
	e.waitRunning("orphan")
	for _, pid := range first {
		if testutil.Alive(pid) {
			t.Errorf("process %d of the first run is still alive after the second start", pid)
		}
	}
}

// C2 (nomad#17134): SIGTERM of the agent exits 0 only after every process
// of every job is gone and every job cgroup is removed.
func TestStopRemovesEverything(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["sleeper", "grouped"]

[[group]]
name = "pair"
limits = { memory = "64MiB" }

[[connector]]
name = "sleeper"
  [connector.run]
  command = ["sleep", "infinity"]

[[connector]]
name = "grouped"
group = "pair"
  [connector.run]
  command = ["/bin/sh", "-c", "sleep 1000 & sleep 1000 & wait"]
`)
	e.start()
	js := e.waitRunning("sleeper", "grouped")
	// The grouped job's shell forks its two sleeps after it is running.
	var pids []int
	testutil.Eventually(t, 10*time.Second, "the sleeper, the shell and its two sleeps under the root", func() bool {
		pids = nil
		for _, d := range e.cgroupDirs() {
			pids = append(pids, testutil.ProcsUnder(filepath.Join(d, "jobs"))...)
			pids = append(pids, testutil.ProcsUnder(filepath.Join(d, "groups"))...)
		}
		pids = uniq(pids)
		return len(pids) >= 4
	})
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("agent exit after SIGTERM: %v\n%s", err, e.out)
	}
	for _, pid := range uniq(pids) {
		if testutil.Alive(pid) {
			t.Errorf("job process %d alive after the agent exited", pid)
		}
	}
	for _, d := range e.cgroupDirs() {
		_ = filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() && (strings.Contains(p, "/jobs/") || strings.Contains(p, "/groups/")) {
				t.Errorf("job cgroup %s left after the agent exited", p)
			}
			return nil
		})
	}
	if left := e.cgroupDirs(); len(left) != 0 {
		t.Errorf("cgroup root left after the agent exited: %v", left)
	}
	for _, lock := range []string{e.cgroupLock(), e.dataLock()} {
		if _, err := os.Stat(lock); !os.IsNotExist(err) {
			t.Errorf("lock file %s left after a clean stop (stat: %v)", lock, err)
		}
	}
	if js["grouped"].Cgroup != "/"+e.root+"/groups/pair/grouped" {
		t.Errorf("grouped job's cgroup = %q, want /%s/groups/pair/grouped", js["grouped"].Cgroup, e.root)
	}
}

// A reload with a broken file changes nothing: same processes, same limits;
// a good reload then updates limits in place (same PID), starts an added job
// and stops a removed one.
func TestReload(t *testing.T) {
	e := newEnv(t)
	base := e.header("2s") + `
[static]
connectors = ["keep", "drop"]

[[connector]]
name = "keep"
  [connector.run]
  command = ["sleep", "infinity"]
  limits = { memory = "64MiB", pids = 32 }

[[connector]]
name = "drop"
  [connector.run]
  command = ["sleep", "infinity"]
`
	e.write(base)
	e.start()
	before := e.waitRunning("keep", "drop")
	memFile := "/sys/fs/cgroup/memory/" + e.root + "/jobs/keep/memory.limit_in_bytes"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		memFile = "/sys/fs/cgroup/" + e.root + "/jobs/keep/memory.max"
	}
	readMem := func() string { b, _ := os.ReadFile(memFile); return strings.TrimSpace(string(b)) }
	if got := readMem(); got != "67108864" {
		t.Fatalf("memory limit before reload = %q, want 67108864", got)
	}

	// Broken: an unknown key and a bad unit.
	e.write(strings.Replace(base, `memory = "64MiB"`, `memory = "64MiX", bogus = 1`, 1))
	if err := e.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "reload refusal in the log", func() bool {
		return strings.Contains(e.out.String(), "reload refused")
	})
	after := e.waitRunning("keep", "drop")
	for _, id := range []string{"keep", "drop"} {
		if after[id].PID != before[id].PID {
			t.Errorf("job %s restarted by a broken reload: pid %d -> %d", id, before[id].PID, after[id].PID)
		}
	}
	if got := readMem(); got != "67108864" {
		t.Errorf("memory limit after broken reload = %q, want 67108864", got)
	}

	// Good: change keep's memory, drop "drop", add "add".
	good := strings.Replace(base, `memory = "64MiB"`, `memory = "96MiB"`, 1)
	good = strings.Replace(good, `connectors = ["keep", "drop"]`, `connectors = ["keep", "add"]`, 1)
	good = strings.Replace(good, `name = "drop"`, `name = "add"`, 1)
	e.write(good)
	if err := e.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "add running and drop gone", func() bool {
		js := e.jobs()
		_, dropped := js["drop"]
		return js["add"].State == "running" && !dropped
	})
	if got := readMem(); got != "100663296" {
		t.Errorf("memory limit after good reload = %q, want 100663296", got)
	}
	if pid := e.jobs()["keep"].PID; pid != before["keep"].PID {
		t.Errorf("a limits-only change restarted keep: pid %d -> %d", before["keep"].PID, pid)
	}
	if testutil.Alive(before["drop"].PID) {
		t.Errorf("removed job's process %d still alive", before["drop"].PID)
	}
}

func uniq(xs []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// A second agent on the same configuration (same data_dir, cgroup root and
// listen address) refuses to start and touches nothing: the first agent's
// jobs keep running in their cgroups.
func TestSecondAgentRefusesAndTouchesNothing(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["only"]

[[connector]]
name = "only"
  [connector.run]
  command = ["sleep", "infinity"]
`)
	e.start()
	before := e.waitRunning("only")
	out, err := exec.Command(berthBin, "agent", "--config", e.config).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another berth agent") {
		t.Fatalf("second agent: err %v, want a refusal naming the other agent\n%s", err, out)
	}
	after := e.waitRunning("only")
	if after["only"].PID != before["only"].PID || !testutil.Alive(before["only"].PID) {
		t.Errorf("the second agent disturbed the first one's job: pid %d -> %d", before["only"].PID, after["only"].PID)
	}
}

// With its store unreachable at start the agent serves its API (not ready,
// state "joining"), runs nothing, and a SIGTERM stops it cleanly with no
// cgroup left.
func TestStoreUnreachableAtStart(t *testing.T) {
	e := newEnv(t)
	dead := testutil.FreePort(t) // nothing listens there
	e.write(e.header("1s") + `
[cluster]
endpoints = ["http://` + dead + `"]

[static]
connectors = ["never"]

[[connector]]
name = "never"
  [connector.run]
  command = ["sleep", "infinity"]
`)
	e.launch()
	var state struct {
		State string `json:"state"`
	}
	testutil.Eventually(t, 20*time.Second, "/v1/agent says joining", func() bool {
		return getJSONQuiet("http://"+e.addr+"/v1/agent", &state) == http.StatusOK && state.State == "joining"
	})
	if code := getJSONQuiet("http://"+e.addr+"/healthz", nil); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz while joining = %d, want 503", code)
	}
	if ps := procsUnderAll(e); len(ps) != 0 {
		t.Errorf("jobs run while the agent is not a member: %v", ps)
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM while joining: %v\n%s", err, e.out)
	}
	if left := e.cgroupDirs(); len(left) != 0 {
		t.Errorf("cgroups left: %v", left)
	}
}

// procsUnderAll lists the processes of every job and group cgroup (not
// the agent's or the lease guard's leaf).
func procsUnderAll(e *env) []int {
	var ps []int
	for _, d := range e.cgroupDirs() {
		for _, sub := range []string{"jobs", "groups"} {
			ps = append(ps, testutil.ProcsUnder(filepath.Join(d, sub))...)
		}
	}
	return ps
}

// getJSONQuiet is getJSON that reports a failed request as status 0.
func getJSONQuiet(url string, v any) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == http.StatusOK {
		if json.NewDecoder(resp.Body).Decode(v) != nil {
			return 0
		}
	}
	return resp.StatusCode
}
