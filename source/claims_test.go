package source

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/internal/testutil"
)

// batchRecorder is a Source whose ClaimMany records each call: the jobs
// ending in an even number are won, the others held by "m2", and the call
// whose first job is failAt fails.
type batchRecorder struct {
	Source
	mu     sync.Mutex
	calls  [][]string
	failAt string
}

func (b *batchRecorder) ClaimMany(_ context.Context, jobs []string, renew func(string) bool) ([]cluster.Claimed, map[string]string, error) {
	b.mu.Lock()
	b.calls = append(b.calls, jobs)
	b.mu.Unlock()
	if jobs[0] == b.failAt {
		return nil, nil, errors.New("store down")
	}
	var won []cluster.Claimed
	held := map[string]string{}
	for _, j := range jobs {
		if n, _ := strconv.Atoi(j[1:]); n%2 == 0 {
			c := cluster.Claimed{Job: j}
			if renew(j) {
				c.Revision = int64(n)
			}
			won = append(won, c)
		} else {
			held[j] = "m2"
		}
	}
	return won, held, nil
}

func TestClaimInBatches(t *testing.T) {
	var jobs []string
	for i := range 10 {
		jobs = append(jobs, "j"+strconv.Itoa(i))
	}
	rec := &batchRecorder{failAt: "j4"}
	var got []ClaimBatch
	renew := func(j string) bool { return j != "j0" }
	for b := range ClaimInBatches(context.Background(), rec, jobs, renew, 4, time.Second) {
		got = append(got, b)
	}
	if len(got) != 3 || len(rec.calls) != 3 {
		t.Fatalf("%d batches, %d calls; want 3 of 4, 4 and 2 jobs", len(got), len(rec.calls))
	}
	// The transactions may run in any order; the batches come in jobs'.
	var seen []string
	for i, b := range got {
		if !slices.ContainsFunc(rec.calls, func(c []string) bool { return slices.Equal(c, b.Jobs) }) {
			t.Errorf("batch %d: jobs %v, not one of the calls %v", i, b.Jobs, rec.calls)
		}
		seen = append(seen, b.Jobs...)
	}
	if !slices.Equal(seen, jobs) {
		t.Errorf("jobs in batches %v, want %v in order", seen, jobs)
	}
	if got[1].Err == nil || got[0].Err != nil || got[2].Err != nil {
		t.Errorf("errors %v, %v, %v: want only the second batch's", got[0].Err, got[1].Err, got[2].Err)
	}
	if !slices.Equal(got[2].Won, []cluster.Claimed{{Job: "j8", Revision: 8}}) || got[2].Held["j9"] != "m2" {
		t.Errorf("last batch won %v held %v", got[2].Won, got[2].Held)
	}
	if !slices.Equal(got[0].Won, []cluster.Claimed{{Job: "j0"}, {Job: "j2", Revision: 2}}) {
		t.Errorf("first batch won %v: want j0 (not renewed) and j2", got[0].Won)
	}
}

// overlapRecorder is a Source whose ClaimMany waits until claimsInFlight
// calls are under way at once (or its deadline passes: an error).
type overlapRecorder struct {
	Source
	mu      sync.Mutex
	now     int
	all     chan struct{}
	timeout time.Duration
}

func (o *overlapRecorder) ClaimMany(_ context.Context, jobs []string, _ func(string) bool) ([]cluster.Claimed, map[string]string, error) {
	o.mu.Lock()
	o.now++
	if o.now == claimsInFlight {
		close(o.all)
	}
	o.mu.Unlock()
	select {
	case <-o.all:
		won := make([]cluster.Claimed, len(jobs))
		for i, j := range jobs {
			won[i] = cluster.Claimed{Job: j}
		}
		return won, nil, nil
	case <-time.After(o.timeout):
		return nil, nil, errors.New("the other transactions never came")
	}
}

// The claims of a start go claimsInFlight transactions at a time, and
// still come to the caller in the order of the jobs: one at a time, a
// resumed session's reads were most of an adoption of 10,000 runs after
// the join.
func TestClaimInBatchesOverlap(t *testing.T) {
	var jobs []string
	for i := range 4 * claimsInFlight {
		jobs = append(jobs, "j"+strconv.Itoa(i))
	}
	o := &overlapRecorder{all: make(chan struct{}), timeout: testutil.Deadline(20 * time.Second)}
	var seen []string
	for b := range ClaimInBatches(context.Background(), o, jobs, nil, 2, time.Minute) {
		if b.Err != nil {
			t.Fatalf("batch %v: %v (fewer than %d transactions under way at once)", b.Jobs, b.Err, claimsInFlight)
		}
		seen = append(seen, b.Jobs...)
	}
	if !slices.Equal(seen, jobs) {
		t.Errorf("jobs in batches %v, want %v in order", seen, jobs)
	}
}
