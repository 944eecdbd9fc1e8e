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
// as soon as it and every batch before it are known, so that the caller
// starts the first jobs while the store takes the later claims. Up to
// claimsInFlight transactions are under way at once (each batch's keys
// are its own, so their order in the store does not matter), and at most
// claimsInFlight outcomes wait for the caller. The channel is closed after
// the last batch; the caller must drain it (a cancelled ctx makes the
// remaining batches fail at once). A size below 1 claims all jobs in one
// call. renew is ClaimMany's: the jobs whose claims are written even when
// they already are this agent's.
func ClaimInBatches(ctx context.Context, s Source, jobs []string, renew func(string) bool, size int, timeout time.Duration) <-chan ClaimBatch {
	if size < 1 {
		size = max(1, len(jobs))
	}
	out := make(chan ClaimBatch, claimsInFlight)
	// Each batch's outcome comes on its own channel; order holds them in
	// the order of jobs, and its capacity bounds the batches under way.
	order := make(chan chan ClaimBatch, claimsInFlight)
	go func() { // ends once every batch is under way
		defer close(order)
		for i := 0; i < len(jobs); i += size {
			one := make(chan ClaimBatch, 1)
			order <- one
			b := ClaimBatch{Jobs: jobs[i:min(i+size, len(jobs))]}
			go func() { // ends with its transaction
				cctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				b.Won, b.Held, b.Err = s.ClaimMany(cctx, b.Jobs, renew)
				one <- b
			}()
		}
	}()
	go func() { // ends once the caller has drained out, after every batch
		defer close(out)
		for one := range order {
			out <- <-one
		}
	}()
	return out
}

// claimsInFlight is how many claim transactions of one start are under
// way at once: a resumed session's read-only ones take a few ms each,
// and one at a time they were most of the 0.6 s from the join to 10,000
// runs adopted.
const claimsInFlight = 4
