package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	jobspec "github.com/berthd/berth/spec"
)

// A stop for memory pressure is graceful (the job's TERM trap runs and it
// exits 0), its exit carries the cause, counts as a failure (on-failure
// restarts it), and the next run is watched again; with no run under way
// PressureStop signals nothing.
func TestPressureStop(t *testing.T) {
	g := newTestGroup(t, 0)
	spec := sh(g, `trap "echo flushed; exit 0" TERM; while :; do sleep 0.05; done`)
	spec.Restart = jobspec.RestartOnFailure
	spec.Backoff = Backoff{Initial: 10 * time.Millisecond}
	var logs testutil.SyncBuffer
	spec.Log = &logs
	w := startWorker(t, spec)
	trapped := func() {
		pid := waitRunning(t, w)
		testutil.Eventually(t, 30*time.Second, "the trap and the loop", func() bool { return len(descendants(pid)) > 0 })
	}
	trapped()
	const cause = "usage 2 bytes crossed memory_high 1 bytes (test)"
	sent, ok := w.PressureStop(cause, time.Now())
	if !ok || sent.IsZero() {
		t.Fatalf("PressureStop of a running job: %v %v", sent, ok)
	}
	if _, again := w.PressureStop(cause, time.Now()); again {
		t.Error("a second PressureStop during the first signalled again")
	}
	testutil.Eventually(t, 20*time.Second, "the run's exit with its memory pressure", func() bool {
		st := w.Status()
		return st.LastExit != nil && st.Restarts >= 1 && st.State == Running
	})
	e := w.Status().LastExit
	if e.Code != 0 || e.MemoryPressure != cause || !strings.HasSuffix(e.Reason, "(memory pressure: "+cause+")") {
		t.Errorf("last exit %+v", e)
	}
	if !strings.Contains(logs.String(), "flushed") {
		t.Errorf("the job's TERM trap did not run:\n%s", logs.String())
	}
	// The next run is stopped again the same way.
	trapped()
	if _, ok := w.PressureStop(cause, time.Time{}); ok {
		t.Error("a pressure that began before the run stopped it")
	}
	if _, ok := w.PressureStop(cause, time.Now()); !ok {
		t.Error("PressureStop of the restarted run did nothing")
	}
}
