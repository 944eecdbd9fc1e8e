package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	jobspec "github.com/berthd/berth/spec"
)

// tokens is a Spec.Token that hands out 100, 101, … and, while fail is
// set, fails.
type tokens struct {
	mu    sync.Mutex
	next  uint64
	calls int
	fail  error
}

func (tk *tokens) token(context.Context) (uint64, error) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.calls++
	if tk.fail != nil {
		return 0, tk.fail
	}
	tk.next++
	return 99 + tk.next, nil
}

func (tk *tokens) setFail(err error) {
	tk.mu.Lock()
	tk.fail = err
	tk.mu.Unlock()
}

// Every run gets a token of its own in BERTH_FENCING_TOKEN (and its
// status), and BERTH_CLAIM_FILE; neither is part of the command's
// fingerprint.
func TestEveryRunGetsItsToken(t *testing.T) {
	g := newTestGroup(t, 0)
	var logs testutil.SyncBuffer
	tk := &tokens{}
	s := sh(g, `echo "token=$BERTH_FENCING_TOKEN claim=$BERTH_CLAIM_FILE"; sleep 0.2; exit 1`)
	s.Restart = jobspec.RestartAlways
	s.Backoff = Backoff{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond, Reset: time.Hour}
	s.Token, s.ClaimFile, s.Log = tk.token, "/run/berth/test.claim", &logs
	before := Fingerprint(&s, "jobs/job")
	w := startWorker(t, s)
	testutil.Eventually(t, 20*time.Second, "three runs", func() bool {
		return strings.Contains(logs.String(), "token=102 ")
	})
	for i := 100; i <= 102; i++ {
		if want := fmt.Sprintf("token=%d claim=/run/berth/test.claim\n", i); !strings.Contains(logs.String(), want) {
			t.Errorf("log has no %q:\n%s", want, logs.String())
		}
	}
	if st := w.Status(); st.Token < 102 {
		t.Errorf("status token %d, want the last run's (≥ 102)", st.Token)
	}
	if after := Fingerprint(&s, "jobs/job"); after != before {
		t.Errorf("fingerprint changed: %s → %s", before, after)
	}
}

// A run whose token cannot be had does not start: the worker backs off
// with the reason in its status and asks again, past the limit of failed
// starts that pass (it is never Failed for it), and starts once the token
// comes; the waits do not count as restarts.
func TestNoTokenNoRun(t *testing.T) {
	g := newTestGroup(t, 0)
	var logs testutil.SyncBuffer
	tk := &tokens{fail: errors.New("the store does not answer")}
	s := sh(g, `echo "token=$BERTH_FENCING_TOKEN"; exec sleep 60`)
	s.Backoff = Backoff{Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond, Reset: time.Hour}
	s.Token, s.Log = tk.token, &logs
	w := startWorker(t, s)
	testutil.Eventually(t, 20*time.Second, "more token waits than failed starts may retry", func() bool {
		tk.mu.Lock()
		defer tk.mu.Unlock()
		return tk.calls > maxStartRetries+2
	})
	st := w.Status()
	if st.State != BackingOff || !strings.Contains(st.Reason, "fencing token: the store does not answer") || st.PID != 0 {
		t.Fatalf("status while the token fails: %+v", st)
	}
	if strings.Contains(logs.String(), "token=") {
		t.Fatalf("a run started without its token:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "berth: not started: fencing token: the store does not answer: trying again in") {
		t.Errorf("no mark of the wait in the job's log:\n%s", logs.String())
	}
	tk.setFail(nil)
	waitRunning(t, w)
	st = w.Status()
	if st.Restarts != 0 || st.Token != 100 || st.Reason != "" {
		t.Fatalf("after the token came: %+v, want restarts 0, token 100", st)
	}
	testutil.Eventually(t, 10*time.Second, "the run's output", func() bool { return strings.Contains(logs.String(), "token=100\n") })
}

// A stop while the worker waits for its token ends it at once.
func TestStopWhileWaitingForToken(t *testing.T) {
	g := newTestGroup(t, 0)
	tk := &tokens{fail: errors.New("no store")}
	s := sh(g, `exec sleep 60`)
	s.Token = tk.token
	w := New(s)
	w.Start()
	waitState(t, w, BackingOff)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Status(); st.State != Stopped {
		t.Fatalf("stopped while waiting: %+v", st)
	}
}
