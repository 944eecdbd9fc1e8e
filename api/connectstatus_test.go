package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
)

// countingBackend counts the reads of every job of this agent.
type countingBackend struct {
	*secBackend
	jobReads atomic.Int32
}

func (b *countingBackend) Jobs() []Job {
	b.jobReads.Add(1)
	return b.secBackend.Jobs()
}

// GET /connectors?expand=status reads this agent's jobs once and asks
// each other member once, however many connectors it reports (before, it
// read all jobs and asked every member again for each connector: at
// 10,000 connectors, 10,000 reads of 10,000 jobs' usage).
func TestExpandStatusReadsEachJobOnce(t *testing.T) {
	const n = 30
	wl := &spec.Workload{}
	var selfJobs, peerJobs []Job
	for i := range n {
		name := fmt.Sprintf("c%02d", i)
		wl.Connectors = append(wl.Connectors, spec.Connector{Name: name, Tasks: 1,
			Run: &spec.Process{Command: []string{"/bin/run"}}, Task: &spec.Process{Command: []string{"/bin/task"}}})
		selfJobs = append(selfJobs, Job{ID: name, Connector: name, Kind: "connector", State: worker.Running, PID: 100 + i})
		peerJobs = append(peerJobs, Job{ID: spec.TaskID(name, 0), Connector: name, Kind: "task", State: worker.Running, PID: 200 + i})
	}
	var peerAsked atomic.Int32
	peerH := Handler(newSecBackend("b", wl, peerJobs...), Options{})
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/jobs" {
			peerAsked.Add(1)
		}
		peerH.ServeHTTP(w, r)
	}))
	defer peer.Close()
	sb := newSecBackend("a", wl, selfJobs...).member("b", peer.URL)
	for i := range n {
		sb.owns(wl.Connectors[i].Name, "a").owns(spec.TaskID(wl.Connectors[i].Name, 0), "b")
	}
	b := &countingBackend{secBackend: sb}
	self := httptest.NewServer(Handler(b, Options{}))
	defer self.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out map[string]ConnectorExpanded
	if err := NewClient(self.Listener.Addr().String()).Get(ctx, "/connectors?expand=status", &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != n {
		t.Fatalf("%d connectors, want %d", len(out), n)
	}
	for name, e := range out {
		if e.Status == nil || e.Status.Connector.State != StateRunning || len(e.Status.Tasks) != 1 ||
			e.Status.Tasks[0].State != StateRunning || e.Status.Tasks[0].WorkerID != "b" {
			t.Errorf("%s: %+v, want the connector RUNNING here and its task RUNNING on b", name, e.Status)
		}
	}
	if got := b.jobReads.Load(); got != 1 {
		t.Errorf("this agent's jobs read %d times, want once", got)
	}
	if got := peerAsked.Load(); got != 1 {
		t.Errorf("the other member asked %d times, want once", got)
	}
}
