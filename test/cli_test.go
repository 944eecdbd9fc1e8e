package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// A bad configuration: the agent does not start, exits 2, and names the
// file, line and key of every error; nothing is left behind.
func TestBadConfigRefusedAtStart(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["a"]

[[connector]]
name = "a"
  [connector.run]
  command = ["sleep", "infinity"]
  limits = { memory = "12 parsecs" }
  colour = "blue"
`)
	out, err := exec.Command(berthBin, "agent", "--config", e.config).CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("agent with a bad config: err %v, want exit 2\n%s", err, out)
	}
	for _, want := range []string{e.config + ":16:", "memory", e.config + ":17:", "colour"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("error output lacks %q:\n%s", want, out)
		}
	}
	if len(e.cgroupDirs()) != 0 {
		t.Errorf("a refused agent made cgroups: %v", e.cgroupDirs())
	}
}

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte(`
[static]
connectors = ["x"]
[[connector]]
name = "x"
tasks = 2
  [connector.task]
  command = ["sleep", "${BERTH_TASK}"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(berthBin, "validate", "--config", good).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "valid") {
		t.Fatalf("validate good: %v\n%s", err, out)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[agent]\nstop_timeout = \"soon\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(berthBin, "validate", "--config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), bad+":2:") || !strings.Contains(string(out), "stop_timeout") {
		t.Fatalf("validate bad: err %v\n%s", err, out)
	}
}

// The example config of the README validates on this host.
func TestExampleConfigValid(t *testing.T) {
	out, err := exec.Command(berthBin, "validate", "--config", "../packaging/examples/berth.toml").CombinedOutput()
	if err != nil {
		t.Fatalf("example config: %v\n%s", err, out)
	}
}

// berth status prints every job; berth logs prints a job's output.
func TestStatusAndLogs(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["hello"]

[[connector]]
name = "hello"
  [connector.run]
  command = ["/bin/sh", "-c", "echo hello from ${BERTH_JOB_ID}; exec sleep infinity"]
`)
	e.start()
	e.waitRunning("hello")
	out, err := exec.Command(berthBin, "status", "--addr", e.addr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hello") || !strings.Contains(string(out), "running") {
		t.Fatalf("berth status: %v\n%s", err, out)
	}
	testutil.Eventually(t, 10*time.Second, "log line", func() bool {
		out, _ = exec.Command(berthBin, "logs", "--config", e.config, "hello").CombinedOutput()
		return strings.Contains(string(out), "hello from hello")
	})
}

// berth apply stores connectors in the cluster (the agent's embedded etcd
// here) and the agent runs them; berth connectors and berth members read
// the store; a pruning apply removes what the file no longer has.
func TestApplyConnectorsMembers(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `
[static]

[[connector]]
name = "base"
  [connector.run]
  command = ["sleep", "infinity"]
`)
	e.start()
	e.waitRunning("base")
	wl := filepath.Join(e.dir, "connectors.toml")
	if err := os.WriteFile(wl, []byte(`
[[connector]]
name = "base"
  [connector.run]
  command = ["sleep", "infinity"]

[[connector]]
name = "extra"
tasks = 2
  [connector.task]
  command = ["sleep", "1${BERTH_TASK}000"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(berthBin, "apply", "--config", e.config, "-f", wl, "--dry-run").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "connector/extra") {
		t.Fatalf("apply --dry-run: %v\n%s", err, out)
	}
	if _, ok := e.jobs()["extra-0"]; ok {
		t.Fatal("a dry run started a job")
	}
	out, err = exec.Command(berthBin, "apply", "--config", e.config, "-f", wl).CombinedOutput()
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	js := e.waitRunning("base", "extra-0", "extra-1")
	if js["extra-1"].Command[1] != "11000" {
		t.Errorf("task command not expanded: %v", js["extra-1"].Command)
	}
	out, err = exec.Command(berthBin, "connectors", "--config", e.config).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "extra") || !strings.Contains(string(out), "base") {
		t.Fatalf("berth connectors: %v\n%s", err, out)
	}
	out, err = exec.Command(berthBin, "members", "--config", e.config).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "e2e") {
		t.Fatalf("berth members: %v\n%s", err, out)
	}
	// A bad file stores nothing and says where.
	bad := filepath.Join(e.dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[[connector]]\nname = \"x\"\ntasks = \"two\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(berthBin, "apply", "--config", e.config, "-f", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), bad+":3:") {
		t.Fatalf("apply of a bad file: err %v\n%s", err, out)
	}
	// Prune: a file without "extra" deletes it, and the agent stops its jobs.
	if err := os.WriteFile(wl, []byte("[[connector]]\nname = \"base\"\n  [connector.run]\n  command = [\"sleep\", \"infinity\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(berthBin, "apply", "--config", e.config, "-f", wl).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "deleted connector/extra") {
		t.Fatalf("apply (prune): %v\n%s", err, out)
	}
	testutil.Eventually(t, 20*time.Second, "extra's jobs stopped", func() bool {
		js := e.jobs()
		_, a := js["extra-0"]
		_, b := js["extra-1"]
		return !a && !b && js["base"].State == "running"
	})
	if js["base"].PID != e.jobs()["base"].PID {
		t.Error("an apply that did not change base restarted it")
	}
}

// berth reload -c FILE when the running agent runs another file: nothing
// is signalled, the command fails at once naming both files; its own file
// with a security file that does not load is refused; its own file, named
// through a symbolic link, reloads.
func TestCLIReloadOtherFile(t *testing.T) {
	e := newEnv(t)
	body := e.header("1s") + "\n[static]\nconnectors = [\"a\"]\n[[connector]]\nname = \"a\"\n  [connector.run]\n  command = [\"sleep\", \"infinity\"]\n"
	e.write(body)
	e.start()
	e.waitRunning("a")
	other := filepath.Join(e.dir, "other.toml")
	if err := os.WriteFile(other, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	reloads := func() uint64 {
		var a api.Agent
		getJSON(t, "http://"+e.addr+"/v1/agent", &a)
		return a.Config.Reloads
	}
	n := reloads()
	start := time.Now()
	out, code := runBerth(t, "reload", "--config", other, "--timeout", testutil.Deadline(30*time.Second).String())
	if code != 1 || !strings.Contains(out, "runs "+e.config+", not "+other) {
		t.Errorf("berth reload -c another file: exit %d, want 1 naming both files:\n%s", code, out)
	}
	if d := time.Since(start); d > testutil.Deadline(20*time.Second) {
		t.Errorf("berth reload -c another file waited %v", d)
	}
	if got := reloads(); got != n {
		t.Errorf("the agent reloaded (%d -> %d) for another file", n, got)
	}
	// Its own file with a security file that does not load: refused on
	// reload, as at start, with the key's position.
	e.write(body + "[cluster]\ntls = { ca = \"/nonexistent-berth-ca.pem\" }\n")
	out, code = runBerth(t, "reload", "--config", e.config)
	if code != 1 || !strings.Contains(out, "refused") || !strings.Contains(out, e.config+":16:9: cluster.tls.ca: on this host: CA file: open /nonexistent-berth-ca.pem") {
		t.Errorf("berth reload of a file whose CA file is missing: exit %d, want 1 refused naming cluster.tls.ca:\n%s", code, out)
	}
	e.write(body)
	link := filepath.Join(e.dir, "link.toml")
	if err := os.Symlink(e.config, link); err != nil {
		t.Fatal(err)
	}
	if out, code := runBerth(t, "reload", "--config", link); code != 0 || !strings.Contains(out, "accepted") {
		t.Errorf("berth reload through a symbolic link to the agent's file: exit %d:\n%s", code, out)
	}
}

// berth validate reports every security file problem in one run, each at
// its key's position (web_config_file, password files, the tls files of
// [cluster] and [agent.client]), with a header line and one problem per
// line; the agent refuses the same file before it touches any cgroup.
func TestValidateSecurityFilesAllAtOnce(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `web_config_file = "/nonexistent-berth-web.yml"
[agent.client]
username = "u"
password_file = "/nonexistent-berth-pw"
tls = { ca = "/nonexistent-berth-client-ca.pem" }
[cluster]
endpoints = ["https://127.0.0.1:2379"]
tls = { ca = "/nonexistent-berth-ca.pem" }
`)
	out, code := runBerth(t, "validate", "--config", e.config)
	want := []string{
		"berth validate: " + e.config + ": 4 problems",
		e.config + ":8:1: agent.web_config_file: on this host: web configuration /nonexistent-berth-web.yml: ",
		e.config + ":11:1: agent.client.password_file: on this host: password_file /nonexistent-berth-pw: ",
		e.config + ":12:9: agent.client.tls.ca: on this host: CA file: open /nonexistent-berth-client-ca.pem: ",
		e.config + ":15:9: cluster.tls.ca: on this host: CA file: open /nonexistent-berth-ca.pem: ",
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 2 || len(lines) != len(want) {
		t.Fatalf("berth validate: exit %d, want 2 with %d lines:\n%s", code, len(want), out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want it to start with %q", i+1, lines[i], w)
		}
	}
	out, code = runBerth(t, "agent", "--config", e.config)
	if code != 2 || !strings.Contains(out, "cluster.tls.ca: on this host") || strings.Contains(out, "cannot reach etcd") {
		t.Errorf("berth agent: exit %d, want 2 refusing the file:\n%s", code, out)
	}
	if len(e.cgroupDirs()) != 0 {
		t.Errorf("a refused agent made cgroups: %v", e.cgroupDirs())
	}
}
