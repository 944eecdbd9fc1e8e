package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// The failure cases C15–C18 of docs/cases.md, each on the real agent.

// memoryLimitAt reads the memory limit of the cgroup at rel below this
// test's cgroup root, bytes: v1 memory.limit_in_bytes, else v2 memory.max.
func (e *env) memoryLimitAt(rel string) (int64, bool) {
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup/memory", e.root, rel, "memory.limit_in_bytes"),
		filepath.Join("/sys/fs/cgroup", e.root, rel, "memory.max"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// apply runs `berth apply -f` with body, and flags, against the agent's
// store.
func (e *env) apply(body string, flags ...string) string {
	e.t.Helper()
	f := filepath.Join(e.dir, "connectors.toml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
	out, err := exec.Command(berthBin, append([]string{"apply", "--config", e.config, "-f", f}, flags...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("berth apply: %v\n%s", err, out)
	}
	return string(out)
}

// C15 (impermanence#132): sharing group "sinks" and a connector named
// "g-sinks" (the group's directory in an older layout) get two cgroups;
// neither's limit is the other's; deleting the connector leaves the group
// and its job untouched. A connector named like a kernel file is refused
// by `berth apply`.
func TestC15GroupAndConnectorNeverShareACgroup(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + "\n[static]\n")
	e.start()
	group := `
[[group]]
name = "sinks"
limits = { memory = "64MiB" }

[[connector]]
name = "grouped"
group = "sinks"
  [connector.run]
  command = ["sleep", "infinity"]
`
	e.apply(group + `
[[connector]]
name = "g-sinks"
  [connector.run]
  command = ["sleep", "infinity"]
  limits = { memory = "32MiB" }
`)
	js := e.waitRunning("grouped", "g-sinks")
	if js["grouped"].Cgroup == js["g-sinks"].Cgroup || strings.HasPrefix(js["grouped"].Cgroup, js["g-sinks"].Cgroup+"/") {
		t.Fatalf("grouped job in %s, connector g-sinks in %s", js["grouped"].Cgroup, js["g-sinks"].Cgroup)
	}
	if want := "/" + e.root + "/groups/sinks/grouped"; js["grouped"].Cgroup != want {
		t.Errorf("grouped job's cgroup = %s, want %s", js["grouped"].Cgroup, want)
	}
	if lim, ok := e.memoryLimitAt("groups/sinks"); !ok || lim != 64<<20 {
		t.Errorf("group sinks memory limit = %d (%v), want 64MiB", lim, ok)
	}
	if lim, ok := e.memoryLimitAt("jobs/g-sinks"); !ok || lim != 32<<20 {
		t.Errorf("connector g-sinks memory limit = %d (%v), want 32MiB", lim, ok)
	}

	// Delete the connector: the group's job keeps running, same process,
	// and the group keeps its cgroup and its limit.
	if out := e.apply(group); !strings.Contains(out, "deleted connector/g-sinks") {
		t.Fatalf("apply did not delete g-sinks:\n%s", out)
	}
	testutil.Eventually(t, 20*time.Second, "g-sinks stopped", func() bool {
		_, ok := e.jobs()["g-sinks"]
		return !ok
	})
	after := e.jobs()["grouped"]
	if after.State != "running" || after.PID != js["grouped"].PID || !testutil.Alive(after.PID) {
		t.Errorf("grouped job after deleting g-sinks: %s pid %d (was %d)", after.State, after.PID, js["grouped"].PID)
	}
	if lim, ok := e.memoryLimitAt("groups/sinks"); !ok || lim != 64<<20 {
		t.Errorf("group sinks memory limit after deleting g-sinks = %d (%v), want 64MiB", lim, ok)
	}

	// A name the kernel's own files take is refused before anything is stored.
	f := filepath.Join(e.dir, "bad.toml")
	if err := os.WriteFile(f, []byte("[[connector]]\nname = \"tasks\"\n  [connector.run]\n  command = [\"sleep\", \"1\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(berthBin, "apply", "--config", e.config, "-f", f).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "kernel") {
		t.Errorf("apply of a connector named tasks: err %v\n%s", err, out)
	}
}

// C18 (supervisor#307): a job run as another user gets HOME, USER,
// LOGNAME and SHELL from the passwd entry and systemd's default PATH, so
// that it can find programs by name; what its env sets wins; its working
// directory is working_directory.
func TestC18EnvironmentUnderUser(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `
[static]

[[connector]]
name = "who"
  [connector.run]
  command = ["/bin/sh", "-c", "echo \"user=$USER logname=$LOGNAME home=$HOME shell=$SHELL path=$PATH pwd=$(pwd) sleep=$(command -v sleep)\"; exec sleep infinity"]
  user = "nobody"
  working_directory = "/usr"

[[connector]]
name = "own"
  [connector.run]
  command = ["/bin/sh", "-c", "echo \"home=$HOME path=$PATH\"; exec sleep infinity"]
  user = "nobody"
  env = { HOME = "/tmp", PATH = "/usr/bin:/bin" }
`)
	e.start()
	e.waitRunning("who", "own")
	shell := ""
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	home := ""
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) == 7 && f[0] == "nobody" {
			home, shell = f[5], f[6]
		}
	}
	if shell == "" {
		t.Skip("no user nobody in /etc/passwd")
	}
	want := map[string]string{
		"who": "user=nobody logname=nobody home=" + home + " shell=" + shell +
			" path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin pwd=/usr sleep=/usr/bin/sleep",
		"own": "home=/tmp path=/usr/bin:/bin",
	}
	for job, line := range want {
		testutil.Eventually(t, 10*time.Second, job+" prints "+line, func() bool {
			out, _ := os.ReadFile(filepath.Join(e.dir, "log", job+".log"))
			return strings.Contains(string(out), line+"\n")
		})
	}
}

// C17 (automq#3274): a task that exits 3 with restart = "never", one that
// is OOM-killed and one that cannot start are FAILED in the Connect-shaped
// status, each with its reason and the last lines of its log in trace —
// never STOPPED with an empty trace. A clean exit is STOPPED.
func TestC17DeadTaskShownFailed(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `
[static]

[[connector]]
name = "dead"
tasks = 3
  [connector.task]
  command = ["/bin/sh", "-c", "echo task ${BERTH_TASK} sees the end; [ ${BERTH_TASK} = 0 ] && exit 3; [ ${BERTH_TASK} = 1 ] && exec /usr/bin/tail /dev/zero; exit 0"]
  restart = "never"
  limits = { memory = "32MiB" }
`)
	e.start()
	// A program missing on this host: the agent file refuses it, a
	// definition stored with berth apply (checked for limits only) reaches
	// the agent and fails to start there.
	e.apply(`
[[connector]]
name = "nostart"
  [connector.run]
  command = ["/nonexistent/program"]
`, "--prune=false")
	var st ctStatus
	testutil.Eventually(t, 30*time.Second, "dead's tasks ended", func() bool {
		st = e.connectStatus("dead")
		return len(st.Tasks) == 3 && st.Tasks[0].State != "RUNNING" && st.Tasks[1].State != "RUNNING" &&
			st.Tasks[1].State != "RESTARTING" && st.Tasks[2].State != "RUNNING"
	})
	want := []struct {
		state string
		trace []string
	}{
		{"FAILED", []string{"exited 3", "task 0 sees the end", "last lines of "}},
		{"FAILED", []string{"OOM kill", "task 1 sees the end"}},
		{"STOPPED", nil},
	}
	for i, w := range want {
		got := st.Tasks[i]
		if got.State != w.state {
			t.Errorf("task %d: state %s, want %s (trace %q)", i, got.State, w.state, got.Trace)
		}
		for _, s := range w.trace {
			if !strings.Contains(got.Trace, s) {
				t.Errorf("task %d: trace %q lacks %q", i, got.Trace, s)
			}
		}
		if w.trace == nil && got.Trace != "" {
			t.Errorf("task %d: clean exit with trace %q", i, got.Trace)
		}
	}
	var ns ctStatus
	testutil.Eventually(t, 20*time.Second, "nostart FAILED", func() bool {
		ns = ctStatus{}
		return getAPI(e.addr, "/connectors/nostart/status", &ns) == nil && ns.Connector.State == "FAILED"
	})
	if !strings.Contains(ns.Connector.Trace, "/nonexistent/program") {
		t.Errorf("nostart's trace %q does not name the missing program", ns.Connector.Trace)
	}
}

// C16 (cri-o#7643), the runtime half: a limit that validates but that the
// kernel refuses when it is written — on cgroup v1 a job's CPU quota above
// its sharing group's (EINVAL: the v1 CFS hierarchy requires a child's
// quota within its parent's) — leaves the job failed with the reason, is
// not retried on a timer (one failure line, also after later reconcile
// passes), and leaves no half-made cgroup; a reload tries it again.
func TestC16KernelRefusalIsFailedNotRetried(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err != nil {
		t.Skip("needs the cgroup v1 cpu controller: cgroup v2 caps a child's quota by its parent's instead of refusing it")
	}
	e := newEnv(t)
	body := e.header("1s") + `
[static]

[[group]]
name = "half"
limits = { cpu = 0.5 }

[[connector]]
name = "greedy"
group = "half"
  [connector.run]
  command = ["sleep", "infinity"]
  limits = { cpu = 1 }
`
	e.write(body)
	e.start()
	var j api.Job
	testutil.Eventually(t, 20*time.Second, "greedy failed", func() bool {
		j = e.jobs()["greedy"]
		return j.State == "failed"
	})
	if !strings.Contains(j.Reason, "invalid argument") {
		t.Errorf("reason %q, want the kernel's EINVAL", j.Reason)
	}
	if j.NextRestart != nil {
		t.Errorf("a permanent start error has a next restart at %v", j.NextRestart)
	}
	if e.jobCgroupExists("groups/half/greedy") {
		t.Error("a half-made cgroup of the failed job is left")
	}
	// Later reconcile passes (a new connector) do not try it again.
	e.apply(`
[[group]]
name = "half"
limits = { cpu = 0.5 }

[[connector]]
name = "greedy"
group = "half"
  [connector.run]
  command = ["sleep", "infinity"]
  limits = { cpu = 1 }

[[connector]]
name = "other"
  [connector.run]
  command = ["sleep", "infinity"]
`)
	e.waitRunning("other")
	const failed = `msg="job failed to start; it is retried on reload or when its definition changes" job_id=greedy`
	if n := strings.Count(e.out.String(), failed); n != 1 {
		t.Errorf("%d failure lines for greedy, want 1 (no retry on a timer)", n)
	}
	if st := e.connectStatus("greedy"); st.Connector.State != "FAILED" || !strings.Contains(st.Connector.Trace, "invalid argument") {
		t.Errorf("Connect status of greedy = %+v", st.Connector)
	}
	// A reload tries it again (and fails again the same way).
	if err := e.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "a second try after the reload", func() bool {
		return strings.Count(e.out.String(), failed) == 2
	})
}
