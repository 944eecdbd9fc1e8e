package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"go.uber.org/goleak"
)

// A Runtime refuses to close while one of its workers runs, and closes
// once the worker has stopped: every goroutine it started has returned,
// while a second Runtime (the tests' own) keeps working. A worker started
// on a closed Runtime fails with ErrRuntimeClosed.
func TestRuntimeCloseAfterLastWorker(t *testing.T) {
	before := goleak.IgnoreCurrent()
	rt, err := StartRuntime()
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGroup(t, 0)
	spec := sh(g, "sleep 1000")
	spec.Runtime = rt
	w := New(spec)
	w.Start()
	pid := waitRunning(t, w)

	if err := rt.Close(); err == nil || !strings.Contains(err.Error(), "1 workers have not ended") {
		t.Fatalf("close with a running worker: %v, want refused", err)
	}
	if !testutil.Alive(pid) {
		t.Fatalf("pid %d died when Close was refused", pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatalf("close after the last worker stopped: %v", err)
	}
	if err := rt.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	goleak.VerifyNone(t, before)

	late := New(spec)
	late.Start()
	<-late.Done()
	if st := late.Status(); st.State != Failed || st.Reason != ErrRuntimeClosed.Error() {
		t.Errorf("worker on a closed runtime: %+v, want failed: %v", st, ErrRuntimeClosed)
	}

	// The reaper the tests' Runtime shares is still running.
	other := startWorker(t, sh(g, "exit 3"))
	st := waitState(t, other, Exited)
	if st.LastExit == nil || st.LastExit.Code != 3 {
		t.Errorf("worker on the other runtime: %+v, want exited 3", st)
	}
}

// A worker without a Runtime fails at Start with a reason.
func TestWorkerWithoutRuntime(t *testing.T) {
	w := New(Spec{JobID: "no-runtime", Path: "/bin/true"})
	w.Start()
	<-w.Done() // closed by Start
	if st := w.Status(); st.State != Failed || st.Reason != "no worker runtime" {
		t.Errorf("status %+v, want failed: no worker runtime", st)
	}
}
