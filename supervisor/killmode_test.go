package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
)

// TestKillModeAndSignalApplyInPlace: changing a running job's kill_mode
// (the [agent] one it inherits) or kill_signal (its own) keeps its process,
// as systemd applies KillMode= and KillSignal= on daemon-reload; the job's
// worker gets them for its next stop.
func TestKillModeAndSignalApplyInPlace(t *testing.T) {
	var logs testutil.SyncBuffer
	fa := runFakeAgentWith(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	fa.src.assign(workloadOf(sleeper("a", limits.Limits{})))
	first := fa.waitJob(t, "a", "a running", running)
	inForce := func(mode spec.KillMode, sig spec.Signal) func() bool {
		return func() bool {
			fa.tbl.mu.RLock()
			defer fa.tbl.mu.RUnlock()
			j := fa.tbl.jobs["a"]
			return j != nil && j.spec.Process.KillMode == mode && j.spec.Process.KillSignal == sig
		}
	}
	testutil.Eventually(t, 20*time.Second, "the defaults in force", inForce(spec.DefaultKillMode, spec.DefaultKillSignal))

	body, err := os.ReadFile(fa.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fa.path, []byte(strings.Replace(string(body), `stop_timeout = "1s"`, "stop_timeout = \"1s\"\nkill_mode = \"mixed\"", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fa.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "inherited kill_mode mixed in force", inForce(spec.KillMixed, spec.DefaultKillSignal))

	changed := sleeper("a", limits.Limits{})
	changed.Run.KillSignal = "SIGINT"
	fa.src.assign(workloadOf(changed))
	testutil.Eventually(t, 20*time.Second, "kill_signal SIGINT in force", inForce(spec.KillMixed, "SIGINT"))
	if j, _ := fa.Job("a"); j.PID != first.PID || j.State != worker.Running {
		t.Fatalf("kill_mode/kill_signal change: state %s pid %d, want running pid %d (kept)", j.State, j.PID, first.PID)
	}
	out := logs.String()
	if !strings.Contains(out, "kill_mode: control-group → mixed") || !strings.Contains(out, "kill_signal: SIGTERM → SIGINT") {
		t.Errorf("the in-place lines do not name the changes:\n%s", out)
	}
	if strings.Contains(out, "job definition changed; restarting it") {
		t.Errorf("log says the job was restarted:\n%s", out)
	}
}

// A definition that changes kill_mode together with something that needs a
// new process stops the old process as the new definition says, as
// systemd applies KillMode= at daemon-reload, before the restart.
func TestRestartStopsWithTheNewKillMode(t *testing.T) {
	fa := runFakeAgent(t)
	old := sleeper("k", limits.Limits{})
	old.Run.KillMode = spec.KillMixed
	fa.src.assign(workloadOf(old))
	first := fa.waitJob(t, "k", "k running", running)
	changed := sleeper("k", limits.Limits{}, "2")
	changed.Run.KillMode = spec.KillControlGroup
	fa.src.assign(workloadOf(changed))
	fa.waitJob(t, "k", "k restarted", func(j apiJobView) bool { return running(j) && j.PID != first.PID })
	b, err := os.ReadFile(filepath.Join(fa.Config().Agent.LogDir, "k.log"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("stopping pid %d: SIGTERM to every process of the cgroup", first.PID)
	if !strings.Contains(string(b), want) {
		t.Fatalf("the old process was not stopped with the new kill_mode; want %q in its log:\n%s", want, b)
	}
}
