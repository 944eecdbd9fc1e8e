package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// TestNewDefinitionThatCannotStartKeepsRunning (failure case C20): a
// running job whose new definition names a user or a program that this
// host does not have keeps running its previous definition (same PID);
// the reason shows in its status and in berth_job_update_blocked, and the
// new definition is checked again with backoff, so that it starts once the
// program appears, without another change.
func TestNewDefinitionThatCannotStartKeepsRunning(t *testing.T) {
	fa := runFakeAgent(t)
	fa.src.assign(workloadOf(sleeper("a", limits.Limits{})))
	first := fa.waitJob(t, "a", "a running", running)

	blocked := func(want string) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, "a held with "+want, func() bool {
			j, _ := fa.Job("a")
			return strings.Contains(j.UpdateBlocked, want)
		})
		j, _ := fa.Job("a")
		if j.PID != first.PID || j.State != "running" {
			t.Fatalf("held job: state %s pid %d, want running pid %d", j.State, j.PID, first.PID)
		}
		if !fa.updateBlocked("a") {
			t.Error("the metrics snapshot does not flag the held job")
		}
	}
	noUser := sleeper("a", limits.Limits{})
	noUser.Run.User = "berth-no-such-user"
	fa.src.assign(workloadOf(noUser))
	blocked(`user: "berth-no-such-user" does not resolve on this host`)

	prog := filepath.Join(t.TempDir(), "later")
	noProg := spec.Connector{Name: "a", Run: &spec.Process{Command: []string{prog}, Restart: spec.RestartNever}}
	fa.src.assign(workloadOf(noProg))
	blocked("command[0]: program not found on this host")
	if _, pending := fa.tbl.nextRetry(); !pending {
		t.Fatal("a held definition armed no re-check")
	}

	// The program appears: the next re-check starts the new definition.
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nexec /bin/sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "a restarted with its new definition", func() bool {
		fa.clock.Advance(time.Minute)
		j, _ := fa.Job("a")
		return j.State == "running" && j.PID != first.PID && j.UpdateBlocked == "" && len(j.Command) == 1 && j.Command[0] == prog
	})
	if fa.updateBlocked("a") {
		t.Error("berth_job_update_blocked still set after the new definition started")
	}
}
