package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	eventually(t, 10*time.Second, "log line", func() bool {
		out, _ = exec.Command(berthBin, "logs", "--config", e.config, "hello").CombinedOutput()
		return strings.Contains(string(out), "hello from hello")
	})
}
