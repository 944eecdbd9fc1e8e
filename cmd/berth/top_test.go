package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
)

func TestTopRows(t *testing.T) {
	full := 0.0
	prev := map[string]api.Job{
		"a": {ID: "a", Usage: &api.Usage{GroupUsage: api.GroupUsage{CPUSeconds: 10, IOReadBytes: 1000, IOWriteBytes: 0},
			Pressure: &api.Pressure{CPU: api.Stall{SomeSeconds: 1}, Memory: api.Stall{SomeSeconds: 2, FullSeconds: &full}}}},
		"b": {ID: "b", Usage: &api.Usage{GroupUsage: api.GroupUsage{CPUSeconds: 50}}},
	}
	cur := []api.Job{
		{ID: "a", State: "running", Restarts: 2, Limits: limits.Limits{CPU: 1.5},
			Usage: &api.Usage{GroupUsage: api.GroupUsage{CPUSeconds: 11, MemoryBytes: 100, MemoryLimitBytes: 400, IOReadBytes: 3000, IOWriteBytes: 4096},
				Pressure: &api.Pressure{CPU: api.Stall{SomeSeconds: 1.5}, Memory: api.Stall{SomeSeconds: 2}}}},
		{ID: "b", State: "running", Usage: &api.Usage{GroupUsage: api.GroupUsage{CPUSeconds: 1}}}, // cgroup made anew: counters went back
		{ID: "c", State: "backoff"}, // no usage, no earlier sample
	}
	rows := topRows(prev, cur, 2*time.Second, "cpu")
	if len(rows) != 3 || rows[0].ID != "a" {
		t.Fatalf("rows = %+v", rows)
	}
	a := rows[0]
	if a.CPU != 50 || a.ReadBPS != 1000 || a.WriteBPS != 2048 || a.PSI != [3]float64{25, 0, 0} || a.CPULimit != 1.5 || a.Memory != 100 || a.MemLimit != 400 {
		t.Errorf("a = %+v: want CPU 50%%, read 1000 B/s, write 2048 B/s, PSI cpu 25%% memory 0%% io 0%%", a)
	}
	if b := rows[1]; b.CPU != -1 || b.PSI[0] != -1 {
		t.Errorf("b = %+v: CPU went back (a new cgroup): want CPU unknown; no pressure: unknown", b)
	}
	if c := rows[2]; c.CPU != -1 || c.ReadBPS != -1 || c.WriteBPS != -1 || c.PSI[0] != -1 || c.HasUsage {
		t.Errorf("c = %+v: want every rate unknown", c)
	}
	if got := topRows(prev, cur, time.Second, "job"); got[0].ID != "a" || got[1].ID != "b" || got[2].ID != "c" {
		t.Errorf("sorted by job: %v %v %v", got[0].ID, got[1].ID, got[2].ID)
	}
	if got := topRows(prev, cur, time.Second, "restarts"); got[0].ID != "a" {
		t.Errorf("sorted by restarts: %v first", got[0].ID)
	}

	tp := &top{addr: "127.0.0.1:9750", delay: time.Second, order: "cpu", rows: rows,
		agent: api.Agent{ID: "host-a", State: "member", Generation: 3}}
	lines := tp.frame(60, 5)
	if len(lines) != 5 {
		t.Errorf("frame(60, 5) has %d lines", len(lines))
	}
	for _, l := range lines {
		if len(l) > 60 {
			t.Errorf("line longer than 60: %q", l)
		}
	}
	all := strings.Join(tp.frame(0, 0), "\n")
	for _, want := range []string{"host-a member, generation 3, 3 jobs (2 running, 1 backoff)", "50.0", "1.50", "25.0", "1000B", "2.0KiB"} {
		if !strings.Contains(all, want) {
			t.Errorf("frame lacks %q:\n%s", want, all)
		}
	}
}

// recordingTransport records why each request that failed ended: its
// context's error (nil: not the context).
type recordingTransport struct {
	mu   sync.Mutex
	ends []error
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		rt.mu.Lock()
		rt.ends = append(rt.ends, req.Context().Err())
		rt.mu.Unlock()
	}
	return resp, err
}

func (rt *recordingTransport) ended() []error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]error(nil), rt.ends...)
}

// openPTY returns a pseudo-terminal's master and slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty slave: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// q quits the interactive view while a refresh hangs (an agent that
// does not answer): the refresh is cancelled, not waited out.
func TestTopQuitsDuringFetch(t *testing.T) {
	hanging := make(chan struct{}, 1)
	var calls sync.Mutex
	jobsCalls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/agent":
			fmt.Fprint(w, `{"id":"host-a","state":"member"}`)
		case "/v1/jobs":
			calls.Lock()
			jobsCalls++
			first := jobsCalls == 1
			calls.Unlock()
			if first {
				fmt.Fprint(w, `[]`)
				return
			}
			select {
			case hanging <- struct{}{}:
			default:
			}
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	rt := &recordingTransport{}
	client := api.NewClient(srv.URL)
	client.HTTP = &http.Client{Transport: rt}

	master, slave := openPTY(t)
	go func() { _, _ = io.Copy(io.Discard, master) }() // the terminal shows what is drawn
	// A refresh gives up after 2 s: how the one in flight ended (cancelled,
	// or timed out) tells whether q ended it or berth top waited it out.
	tp := &top{client: client, addr: srv.Listener.Addr().String(), delay: 100 * time.Millisecond, order: "cpu", out: slave}
	done := make(chan error, 1)
	go func() { done <- tp.interactive(context.Background(), int(slave.Fd()), 0) }()
	testutil.Eventually(t, 5*time.Second, "a refresh under way (the agent not answering)", func() bool {
		select {
		case <-hanging:
			return true
		default:
			return false
		}
	})
	if _, err := master.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	var err error
	testutil.Eventually(t, 5*time.Second, "berth top returns after q", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	if err != nil {
		t.Errorf("interactive after q: %v, want nil", err)
	}
	ends := rt.ended()
	if len(ends) != 1 || !errors.Is(ends[0], context.Canceled) {
		t.Errorf("refreshes ended by %v: want the one in flight cancelled by q", ends)
	}
}

// An agent whose GET /v1/jobs takes longer than the old 2 s refresh cut
// (2.5 s; 2.4-3.0 s at 10,000 jobs on a quiet host): berth top and berth
// status wait for it, up to --request-timeout, and a --request-timeout
// shorter than the answer is an error that says so.
func TestSlowAgentAnsweredWithinTheRequestTimeout(t *testing.T) {
	const slow = 2500 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/agent":
			fmt.Fprint(w, `{"id":"host-a","state":"member"}`)
		case "/v1/jobs":
			select { // the agent's latency, not a synchronisation
			case <-time.After(slow):
				fmt.Fprint(w, `[{"id":"slow-0","kind":"task","state":"running","pid":42}]`)
			case <-r.Context().Done():
			}
		case "/v1/groups":
			fmt.Fprint(w, `[]`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	run := func(args ...string) (string, string, error) {
		root := newRoot()
		var out, errOut strings.Builder
		root.SetArgs(append(args, "--config", "/nonexistent/berth.toml", "--addr", srv.URL))
		root.SetOut(&out)
		root.SetErr(&errOut)
		_, err := root.ExecuteC()
		return out.String(), errOut.String(), err
	}
	for _, args := range [][]string{{"top", "--batch", "-n", "1", "-d", "100ms"}, {"status"}} {
		out, stderr, err := run(args...)
		if err != nil || !strings.Contains(out, "slow-0") {
			t.Errorf("berth %s against an agent answering in %v: %v (stderr %q), output %q; want the job", strings.Join(args, " "), slow, err, stderr, out)
		}
		_, _, err = run(append(args, "--request-timeout", "500ms")...)
		if err == nil || !strings.Contains(err.Error(), "is the agent running?") || !strings.Contains(err.Error(), "deadline exceeded") && !strings.Contains(err.Error(), "Timeout") {
			t.Errorf("berth %s --request-timeout 500ms: %v; want a timed-out request", strings.Join(args, " "), err)
		}
		_, _, err = run(append(args, "--request-timeout", "-1s")...)
		if err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("berth %s --request-timeout -1s: %v; want a usage error", strings.Join(args, " "), err)
		}
	}
}
