package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	jobspec "github.com/berthd/berth/spec"
)

// notesRec is a BackoffNotes that keeps the latest note of each job.
type notesRec struct {
	mu   sync.Mutex
	jobs map[string]Pending
}

func (n *notesRec) Waiting(p Pending) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.jobs[p.JobID] = p
}

func (n *notesRec) Done(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.jobs, id)
}

func (n *notesRec) get(id string) (Pending, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.jobs[id]
	return p, ok
}

// ownRuntime is a Runtime of the test's own, closed after its workers
// have stopped.
func ownRuntime(t *testing.T) *Runtime {
	t.Helper()
	rt, err := StartRuntime()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("close runtime: %v", err)
		}
	})
	return rt
}

// A worker that backs off tells its notes (restart count, delay, due
// time), and forgets the note once the run starts or the worker stops; a
// worker made to resume such a note (Resume) waits out its backoff with
// its count and grows its delay on from it.
func TestBackoffCarriedOver(t *testing.T) {
	rt := ownRuntime(t)
	notes := &notesRec{jobs: map[string]Pending{}}

	g := newTestGroup(t, 0)
	spec := sh(g, "exit 1")
	spec.Runtime = rt
	spec.Notes = notes
	spec.Restart = jobspec.RestartAlways
	spec.Backoff = Backoff{Initial: time.Hour, Reset: time.Hour}
	w := startWorker(t, spec)
	st := waitState(t, w, BackingOff)
	// The note follows the state by the time of a log line.
	var p Pending
	var ok bool
	testutil.Eventually(t, 10*time.Second, "the backoff's note", func() bool {
		p, ok = notes.get("job")
		return ok
	})
	if !ok || p.Restarts != 0 || p.Delay != time.Hour || !p.NextRestart.Equal(st.NextRestart) ||
		p.Fingerprint != Fingerprint(&spec, groupPath(g)) || p.LastExit == nil || p.LastExit.Code != 1 {
		t.Fatalf("note %+v (%v), want restart 0, delay 1h, due %v, exit 1", p, ok, st.NextRestart)
	}
	stop := func(w *Worker) {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stop(w)
	if _, ok := notes.get("job"); ok {
		t.Fatal("the note outlived the worker's stop")
	}

	// The next agent's worker: due soon, 4 restarts so far, delay 30 min
	// in force (the next one is an hour).
	spec.Backoff = Backoff{Initial: 10 * time.Millisecond, Max: 2 * time.Hour, Reset: time.Hour}
	w2 := started(t, Resume(spec, Pending{JobID: "job", Fingerprint: p.Fingerprint, Restarts: 4, Delay: 30 * time.Minute,
		NextRestart: time.Now().Add(50 * time.Millisecond), LastExit: p.LastExit}))
	if st := w2.Status(); st.Restarts != 4 || st.LastExit == nil || st.LastExit.Code != 1 {
		t.Errorf("status %+v at Start, want the 4 restarts and the exit carried over", st)
	}
	testutil.Eventually(t, 20*time.Second, "the fifth restart, then its backoff", func() bool {
		s := w2.Status()
		return s.State == BackingOff && s.Restarts == 5
	})
	s := w2.Status()
	if d := s.NextRestart.Sub(s.LastExit.Time); d != time.Hour {
		t.Errorf("delay after the carried 30 min: %s, want 1h (doubled from it)", d)
	}
	// The note follows the state by the time of a log line.
	testutil.Eventually(t, 10*time.Second, "the note of the fifth restart's backoff", func() bool {
		p, ok := notes.get("job")
		return ok && p.Restarts == 5
	})
	if p, ok := notes.get("job"); !ok || p.Restarts != 5 || p.Delay != time.Hour {
		t.Errorf("note %+v (%v), want 5 restarts, delay 1h", p, ok)
	}
	stop(w2)
	if _, ok := notes.get("job"); ok {
		t.Error("the note outlived the resumed worker's stop")
	}
}
