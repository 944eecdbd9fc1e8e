package source

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/berthd/berth/cluster"
)

// batchRecorder is a Source whose ClaimMany records each call: the jobs
// ending in an even number are won, the others held by "m2", and the call
// named by failAt fails.
type batchRecorder struct {
	Source
	calls  [][]string
	failAt int
}

func (b *batchRecorder) ClaimMany(_ context.Context, jobs []string, renew func(string) bool) ([]cluster.Claimed, map[string]string, error) {
	b.calls = append(b.calls, jobs)
	if len(b.calls)-1 == b.failAt {
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
	rec := &batchRecorder{failAt: 1}
	var got []ClaimBatch
	renew := func(j string) bool { return j != "j0" }
	for b := range ClaimInBatches(context.Background(), rec, jobs, renew, 4, time.Second) {
		got = append(got, b)
	}
	if len(got) != 3 || len(rec.calls) != 3 {
		t.Fatalf("%d batches, %d calls; want 3 of 4, 4 and 2 jobs", len(got), len(rec.calls))
	}
	var seen []string
	for i, b := range got {
		if !slices.Equal(b.Jobs, rec.calls[i]) {
			t.Errorf("batch %d: jobs %v, claimed %v", i, b.Jobs, rec.calls[i])
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
