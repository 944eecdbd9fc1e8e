package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/fencing"
	"github.com/berthd/berth/worker"
)

// This file hands out the fencing tokens of runs (docs/fencing.md): a
// run's token is the store revision at which its claim was written (the
// claim's creation, or a guarded re-put of the claim this agent holds),
// checked against the record of the tokens handed out here and written
// to it before the run starts, and only while the claim file holds the
// session's newest deadline.

// runToken is the token a worker's first run starts with, as startJobs
// handed it out from the claim's write: value, or err, why that run may
// not start (the token was refused or could not be recorded); neither:
// the first run asks for one (tokenFunc).
type runToken struct {
	value uint64
	err   error
}

// handTokens hands out, in one write of the record, the tokens of the new
// runs of a claim batch (batch, with claims[i] the claim of batch[i]):
// each job that starts a run (not an adoption or a resumed wait, unless
// its run to adopt is stale) and whose claim was written gets that
// write's revision, or why not, in claims[i].token.
func (e *executor) handTokens(batch []launch, claims []claim) {
	if e.tokens == nil {
		return
	}
	var (
		hands []fencing.Hand
		at    []int
	)
	for i, l := range batch {
		c := claims[i]
		if !c.got || c.written.Revision == 0 || l.wait != nil || l.run != nil && !c.stale {
			continue
		}
		hands = append(hands, fencing.Hand{Job: l.job.ID, Token: uint64(c.written.Revision), Seen: uint64(c.written.Seen)})
		at = append(at, i)
	}
	if len(hands) == 0 {
		return
	}
	for k, err := range e.tokens.Hand(hands) {
		claims[at[k]].token = runToken{value: hands[k].Token, err: err}
	}
}

// staleRun reports whether run, an earlier agent's run of its job, ran
// under an earlier claim than c, the job's claim now: its token is older
// than the claim's creation (it was made anew after the lease the run
// started under had expired).
//
// A run without a token is one of two: started by this release through a
// guard of the previous release, which keeps no token in its records (the
// run's own token is then the highest the record holds for its job, handed
// out under this claim: at or above its creation), or started by a release
// without tokens (the previous release's agent, upgraded from), which has
// none. Either is adopted, never stale: the first takes its token from the
// record, the second stays without one until its next start. A record's
// token from before the claim's creation is not the run's (an earlier
// life of this data_dir handed it out) and is not given to it.
func (e *executor) staleRun(run *worker.Adoptable, c cluster.Claimed) bool {
	if run.Run.Token == 0 {
		if e.tokens != nil {
			if h := e.tokens.Highest(run.Run.JobID); h != 0 && int64(h) >= c.Created {
				run.Run.Token = h
			}
		}
		return false
	}
	return int64(run.Run.Token) < c.Created
}

// tokenFunc is job's worker.Spec.Token: the first call returns first (or
// its error) when startJobs handed it out, every other call renews the
// job's claim for a token of its own (renewToken); a token is returned
// only while the claim file holds the session's newest deadline. nil
// without a record: runs get no token.
func (e *executor) tokenFunc(job string, first runToken) func(context.Context) (uint64, error) {
	if e.tokens == nil {
		return nil
	}
	var (
		mu       sync.Mutex
		used     bool
		reported string
	)
	return func(ctx context.Context) (uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		tok, err := uint64(0), e.claimWritten(ctx)
		if err == nil {
			if !used && (first.value != 0 || first.err != nil) {
				tok, err = first.value, first.err
			} else {
				tok, err = e.renewToken(ctx, job)
			}
			used = true
		}
		e.reportToken(job, err, &reported)
		if err != nil {
			return 0, err
		}
		return tok, nil
	}
}

// renewToken re-writes job's claim, only while it is this agent's, and
// hands out the revision of that write: the token of the job's next run.
// Errors: the claim cannot be proven (the store fails, or the claim is
// not this agent's: the session is lost and the job will be fenced), the
// token would go back (a *fencing.BehindError), or it cannot be recorded.
func (e *executor) renewToken(ctx context.Context, job string) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	c, err := e.source.RenewClaim(cctx, job)
	if err != nil {
		return 0, fmt.Errorf("prove the claim: %w", err)
	}
	if err := e.tokens.Hand([]fencing.Hand{{Job: job, Token: uint64(c.Revision), Seen: uint64(c.Seen)}})[0]; err != nil {
		return 0, err
	}
	return uint64(c.Revision), nil
}

// claimWritten returns nil once the claim file holds the session's newest
// deadline, or why not (it cannot be written); nil without a claim file.
func (e *executor) claimWritten(ctx context.Context) error {
	if e.claimFile == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	return e.claimFile.Written(cctx)
}

// claimFilePath is the claim file's path for a run's environment; "":
// none.
func (e *executor) claimFilePath() string {
	if e.claimFile == nil {
		return ""
	}
	return e.claimFile.Path()
}

// reportToken logs why job's run may not start (err) at ERROR, once per
// kind of reason (reported: the last one logged), and that it may again.
// A token that would go back says what to do.
func (e *executor) reportToken(job string, err error, reported *string) {
	var be *fencing.BehindError
	kind := ""
	switch {
	case errors.As(err, &be):
		kind = "behind"
	case err != nil:
		kind = err.Error()
	}
	if kind == *reported {
		return
	}
	was := *reported
	*reported = kind
	switch {
	case be != nil:
		e.log.Error("job refused to start: its fencing token would not exceed the tokens handed out before", "job_id", job,
			"token", be.Token, "highest", be.Highest, "seen", be.Seen, "error", err)
	case err != nil:
		e.log.Error("job not started: its run has no fencing token; trying again with backoff", "job_id", job, "error", err)
	case was != "":
		e.log.Info("job's fencing token handed out again; the job starts", "job_id", job)
	}
}
