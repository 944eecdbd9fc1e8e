package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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

// apply runs `berth apply -f` with body against the agent's store.
func (e *env) apply(body string) string {
	e.t.Helper()
	f := filepath.Join(e.dir, "connectors.toml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
	out, err := exec.Command(berthBin, "apply", "--config", e.config, "-f", f).CombinedOutput()
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
	eventually(t, 20*time.Second, "g-sinks stopped", func() bool {
		_, ok := e.jobs()["g-sinks"]
		return !ok
	})
	after := e.jobs()["grouped"]
	if after.State != "running" || after.PID != js["grouped"].PID || !alive(after.PID) {
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
		eventually(t, 10*time.Second, job+" prints "+line, func() bool {
			out, _ := os.ReadFile(filepath.Join(e.dir, "log", job+".log"))
			return strings.Contains(string(out), line+"\n")
		})
	}
}
