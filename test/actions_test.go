package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// Operator actions on one host through the CLI: pause frees a connector's
// jobs (process, cgroup) and holds across an agent restart; resume runs
// them again; restarting one task touches no other job; --only-failed
// restarts only the FAILED; stop shows STOPPED with no tasks.

// berth runs the CLI with the agent's config and fails the test on error.
func (e *env) berth(args ...string) string {
	e.t.Helper()
	out, err := exec.Command(berthBin, append(args, "--config", e.config)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("berth %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// jobCgroupExists reports whether job's cgroup is in any hierarchy.
func (e *env) jobCgroupExists(rel string) bool {
	for _, d := range e.cgroupDirs() {
		if _, err := os.Stat(filepath.Join(d, rel)); err == nil {
			return true
		}
	}
	return false
}

// waitState waits until every named job reports state.
func (e *env) waitState(state string, ids ...string) map[string]api.Job {
	e.t.Helper()
	var js map[string]api.Job
	testutil.Eventually(e.t, 20*time.Second, "jobs "+strings.Join(ids, ",")+" "+state, func() bool {
		js = e.jobs()
		for _, id := range ids {
			if string(js[id].State) != state {
				return false
			}
		}
		return true
	})
	return js
}

func TestActionsOneHost(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `
[static]

[[connector]]
name = "a"
tasks = 2
  [connector.run]
  command = ["sleep", "infinity"]
  [connector.task]
  command = ["sleep", "infinity"]

[[connector]]
name = "f"
tasks = 2
  [connector.task]
  command = ["/bin/sh", "-c", "echo task ${BERTH_TASK} up; [ ${BERTH_TASK} = 0 ] && exec sleep infinity; exit 3"]
  restart = "never"
`)
	e.start()
	before := e.waitRunning("a", "a-0", "a-1", "f-0")
	e.waitState("exited", "f-1")

	// Pause: every job of a stops, its cgroup goes, and status says paused.
	if out := e.berth("pause", "a"); !strings.Contains(out, "connector a: paused") {
		t.Errorf("berth pause: %s", out)
	}
	paused := e.waitState("paused", "a", "a-0", "a-1")
	for _, id := range []string{"a", "a-0", "a-1"} {
		if testutil.Alive(before[id].PID) {
			t.Errorf("paused job %s: process %d alive", id, before[id].PID)
		}
		if e.jobCgroupExists("jobs/" + id) {
			t.Errorf("paused job %s: cgroup left", id)
		}
		if !strings.Contains(paused[id].Reason, "paused by cli ") {
			t.Errorf("paused job %s: reason %q, want who paused it", id, paused[id].Reason)
		}
	}
	if out, _ := exec.Command(berthBin, "status", "--addr", e.addr).CombinedOutput(); !strings.Contains(string(out), "paused") {
		t.Errorf("berth status does not show paused:\n%s", out)
	}
	testutil.Eventually(t, 10*time.Second, "the pause in the agent log with who asked", func() bool {
		return strings.Contains(e.out.String(), `msg="connector paused: its jobs here stopped, their cgroups removed" connector=a jobs=a,a-0,a-1 by="cli `)
	})

	// The pause holds across an agent restart: nothing of a starts.
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("agent stop: %v", err)
	}
	e.start()
	e.waitRunning("f-0")
	e.waitState("paused", "a", "a-0", "a-1")
	if strings.Contains(e.out.String(), `msg="job starting" job_id=a `) {
		t.Error("a paused job was started after the agent restarted")
	}

	// Resume: they run again.
	e.berth("resume", "a")
	running := e.waitRunning("a", "a-0", "a-1", "f-0")

	// Restart one task: a new process for it, no other job touched.
	e.berth("restart", "a-1")
	testutil.Eventually(t, 20*time.Second, "a-1 restarted", func() bool {
		j := e.jobs()["a-1"]
		return j.State == "running" && j.PID != running["a-1"].PID
	})
	after := e.jobs()
	for _, id := range []string{"a", "a-0", "f-0"} {
		if after[id].PID != running[id].PID {
			t.Errorf("restart of a-1 restarted %s: pid %d -> %d", id, running[id].PID, after[id].PID)
		}
	}
	if !strings.Contains(e.out.String(), `msg="job restarted on request" job_id=a-1 by="cli `) {
		t.Error("the restart is not in the agent log with who asked")
	}

	// --only-failed: f-1 (exited 3) runs again; f-0 (running) does not.
	f1 := e.jobs()["f-1"]
	e.berth("restart", "f", "--include-tasks", "--only-failed")
	testutil.Eventually(t, 20*time.Second, "f-1 ran again", func() bool {
		j := e.jobs()["f-1"]
		return j.LastExit != nil && f1.LastExit != nil && j.LastExit.Time.After(f1.LastExit.Time)
	})
	if j := e.jobs()["f-0"]; j.PID != running["f-0"].PID {
		t.Errorf("--only-failed restarted the running f-0: pid %d -> %d", running["f-0"].PID, j.PID)
	}
	// A connector without its own job needs --include-tasks.
	if out, err := exec.Command(berthBin, "restart", "f", "--config", e.config).CombinedOutput(); err == nil || !strings.Contains(string(out), "--include-tasks") {
		t.Errorf("berth restart f (no own job): err %v\n%s", err, out)
	}

	// Stop (KIP-875): STOPPED, no tasks in the Connect-shaped status.
	e.berth("stop", "a")
	e.waitState("stopped", "a", "a-0", "a-1")
	var st api.ConnectorStatus
	if code := getJSON(t, "http://"+e.addr+"/connectors/a/status", &st); code != 200 || st.Connector.State != "STOPPED" || len(st.Tasks) != 0 {
		t.Errorf("status of a stopped connector = %d %+v", code, st)
	}
	if out, err := exec.Command(berthBin, "pause", "nope", "--config", e.config).CombinedOutput(); err == nil || !strings.Contains(string(out), `no connector "nope"`) {
		t.Errorf("berth pause nope: err %v\n%s", err, out)
	}
}
