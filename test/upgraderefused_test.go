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
)

// C36: an upgrade to a build that refuses the running file (the previous
// release, which has no memory_low) is refused before the exec: the
// agent runs the new program's validate on the file, and berth upgrade
// prints why within seconds, not after its --timeout; the agent (same
// image) and its jobs (same pids) go on, and an upgrade to a program that
// takes the file then hands over.
func TestC36UpgradeToABuildThatRefusesTheFile(t *testing.T) {
	older := prevBerth(t, prevRelease)
	e := newEnv(t)
	e.bin = filepath.Join(e.dir, "berth")
	copyFile(t, berthBin, e.bin)
	e.write(e.header("2s") + `
[cluster]
session_ttl = "10s"

[static]
connectors = ["sleeper"]

[[connector]]
name = "sleeper"
  [connector.run]
  command = ["sleep", "1000"]
    [connector.run.limits]
    memory = "64MiB"
    memory_low = "1MiB"
`)
	if out, err := exec.Command(older, "validate", "--config", e.config).CombinedOutput(); err == nil {
		t.Fatalf("the previous release takes the file (no key it lacks):\n%s", out)
	}
	e.start()
	before := e.waitRunning("sleeper")
	var ag0 api.Agent
	getJSON(t, "http://"+e.addr+"/v1/agent", &ag0)

	// The older build installed at the agent's path, as a package
	// downgrade renames its file in.
	copyFile(t, older, e.bin+".new")
	if err := os.Rename(e.bin, e.bin+".good"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.bin+".new", e.bin); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	out, err := exec.Command(berthBin, "upgrade", "--config", e.config, "--timeout", "60s").CombinedOutput()
	took := time.Since(t0)
	t.Logf("berth upgrade answered in %s: %s", took.Round(time.Millisecond), strings.TrimSpace(string(out)))
	if err == nil {
		t.Fatalf("berth upgrade to a build that refuses the file succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "refuses the configuration file") || !strings.Contains(string(out), "memory_low") {
		t.Errorf("berth upgrade does not say why (the new program refuses the file, memory_low):\n%s", out)
	}
	// Far below the 60 s it waited for a hand-over that never came.
	if took > 30*time.Second {
		t.Errorf("berth upgrade took %s to say the hand-over was refused", took)
	}
	var ag api.Agent
	getJSON(t, "http://"+e.addr+"/v1/agent", &ag)
	if !ag.ImageStarted.Equal(ag0.ImageStarted) || ag.PID != ag0.PID {
		t.Errorf("agent image %s pid %d after the refusal, %s %d before: the exec happened", ag.ImageStarted, ag.PID, ag0.ImageStarted, ag0.PID)
	}
	if ag.HandOverRefused == nil || !strings.Contains(ag.HandOverRefused.Reason, "memory_low") {
		t.Errorf("GET /v1/agent hand_over_refused = %+v", ag.HandOverRefused)
	}
	if j := e.waitRunning("sleeper")["sleeper"]; j.PID != before["sleeper"].PID {
		t.Errorf("sleeper: pid %d after the refusal, %d before", j.PID, before["sleeper"].PID)
	}
	if !strings.Contains(e.out.String(), "hand-over refused") {
		t.Errorf("the agent's log has no refusal")
	}

	// This build back: the hand-over goes through.
	if err := os.Rename(e.bin+".good", e.bin); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(berthBin, "upgrade", "--config", e.config).CombinedOutput(); err != nil || !strings.Contains(string(out), "1 of 1 runs adopted") {
		t.Fatalf("berth upgrade with this build back: %v\n%s", err, out)
	}
	if j := e.waitRunning("sleeper")["sleeper"]; j.PID != before["sleeper"].PID {
		t.Errorf("sleeper: pid %d after the hand-over, %d before", j.PID, before["sleeper"].PID)
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
}
