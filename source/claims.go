package source

import (
	"context"
	"time"

	"github.com/berthd/berth/cluster"
)

// ClaimBatch is the outcome of the claims of Jobs, one Source.ClaimMany:
// Won lists the claims that are now this agent's, Held maps every other
// job to the member that holds it, and Err is the store's error, after
// which a job in neither may or may not be claimed.
type ClaimBatch struct {
	Jobs []string
	Won  []cluster.Claimed
	Held map[string]string
	Err  error
}

// ClaimInBatches takes the claims of jobs through s, size at a time (one
// store transaction each: etcd's --max-txn-ops bounds size), each batch
// within timeout, and delivers each batch's outcome, in the order of jobs,
// as soon as it is known, so that the caller starts the first jobs while
// the store takes the later claims. It claims at most two batches ahead
// of the caller (one waiting in the channel, one being sent). The channel
// is closed after the last batch; the caller must drain it (a cancelled
// ctx makes the remaining batches fail at once). A size below 1 claims
// all jobs in one call. renew is ClaimMany's: the jobs whose claims are
// written even when they already are this agent's.
func ClaimInBatches(ctx context.Context, s Source, jobs []string, renew func(string) bool, size int, timeout time.Duration) <-chan ClaimBatch {
	if size < 1 {
		size = max(1, len(jobs))
	}
	out := make(chan ClaimBatch, 1)
	go func() { // ends once the caller has drained out
		defer close(out)
		for i := 0; i < len(jobs); i += size {
			b := ClaimBatch{Jobs: jobs[i:min(i+size, len(jobs))]}
			cctx, cancel := context.WithTimeout(ctx, timeout)
			b.Won, b.Held, b.Err = s.ClaimMany(cctx, b.Jobs, renew)
			cancel()
			out <- b
		}
	}()
	return out
}
