package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	jobspec "github.com/berthd/berth/spec"
	"golang.org/x/sys/unix"
)

// TestRetuneAppliesAtNextExitAndStop: Retune on a running worker keeps its
// process; the new restart policy decides its next exit (never → always:
// a killed process is started again) and the new stop timeout its next
// Stop (a process that ignores SIGTERM is killed after the new grace, not
// the old one), as systemd applies Restart= and TimeoutStopSec= on
// daemon-reload.
func TestRetuneAppliesAtNextExitAndStop(t *testing.T) {
	g := newTestGroup(t, 0)
	var logs testutil.SyncBuffer
	spec := sh(g, `trap "" TERM; while :; do sleep 1; done`)
	spec.Restart = jobspec.RestartNever
	spec.StopTimeout = 10 * time.Minute
	spec.Log = &logs
	w := startWorker(t, spec)
	pid := waitRunning(t, w)

	w.Retune(jobspec.RestartAlways, 500*time.Millisecond, jobspec.KillControlGroup, unix.SIGTERM)
	if st := w.Status(); st.PID != pid || st.State != Running {
		t.Fatalf("after Retune: state %s pid %d, want running pid %d", st.State, st.PID, pid)
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var second int
	testutil.Eventually(t, 30*time.Second, "restarted under the new policy", func() bool {
		st := w.Status()
		second = st.PID
		return st.State == Running && st.Restarts == 1 && st.PID != pid && st.PID > 0
	})
	testutil.Eventually(t, 30*time.Second, "trap installed", func() bool { return len(descendants(second)) > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(60*time.Second))
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("stop with the new 500ms grace: %v (the old 10m grace still in force?)", err)
	}
	if e := w.Status().LastExit; e == nil || e.Signal != "SIGKILL" {
		t.Errorf("last exit %+v, want SIGKILL after the grace", e)
	}
	if !strings.Contains(logs.String(), "grace 500ms") {
		t.Errorf("log does not show the new grace:\n%s", logs.String())
	}
}
