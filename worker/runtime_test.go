package worker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
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

// gatedSpawner starts runs on its Runtime's own launcher threads, but
// first waits for gate to open, counting the Spawn calls under way.
type gatedSpawner struct {
	rt        *Runtime
	groups    map[string]Group // by job ID
	gate      chan struct{}
	open      sync.Once
	now, most atomic.Int32
}

func (s *gatedSpawner) Spawn(x *Exec, r Run, logw *os.File, _ int, onExit func(unix.WaitStatus)) (Run, error) {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	<-s.gate
	pid, err := s.rt.Launch(x, s.groups[r.JobID], logw, onExit)
	r.PID = pid
	return r, err
}

func (s *gatedSpawner) Adopt(Run, func(unix.WaitStatus)) {}
func (s *gatedSpawner) Forget(Run)                       {}

// A Runtime has at most startSlots starts under way: more workers than
// that, started at once while the Spawner holds every start, wait for a
// slot (holding no write end of their log pipe, nor sending the Spawner
// its two descriptors), and all run once the Spawner lets the starts go.
func TestStartsUnderWayAreBounded(t *testing.T) {
	rt, err := StartRuntime()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the workers' stops
		if err := rt.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	n := startSlots() + 5
	sp := &gatedSpawner{rt: rt, groups: map[string]Group{}, gate: make(chan struct{})}
	specs := make([]Spec, n)
	for i := range specs {
		specs[i] = sh(newTestGroup(t, 0), "sleep 1000")
		specs[i].JobID = fmt.Sprintf("job%d", i)
		specs[i].Runtime = rt
		specs[i].Spawner = sp
		sp.groups[specs[i].JobID] = specs[i].Group
	}
	ws := make([]*Worker, n)
	for i := range ws {
		ws[i] = startWorker(t, specs[i])
	}
	t.Cleanup(func() { sp.open.Do(func() { close(sp.gate) }) }) // before the stops
	testutil.Eventually(t, 30*time.Second, "every slot taken", func() bool { return sp.now.Load() == int32(startSlots()) })
	sp.open.Do(func() { close(sp.gate) })
	for _, w := range ws {
		waitRunning(t, w)
	}
	if got := sp.most.Load(); got != int32(startSlots()) {
		t.Errorf("%d starts under way at most, want %d", got, startSlots())
	}
}
