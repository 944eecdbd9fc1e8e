package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/retry"
)

// stopJobs stops the given jobs concurrently, removes their cgroups,
// releases their claims and forgets them.
func (e *executor) stopJobs(js []*job, grace time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(js))
	for i, j := range js {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.stopJob(j, grace)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopJob stops job j: the worker's own stop (the stop signal, the grace,
// then the whole cgroup killed), the cgroup removed, and only then its
// claim released (assignment rule 7: never two workers for one job).
func (e *executor) stopJob(j *job, grace time.Duration) error {
	if j.spec.Process.StopTimeout > 0 {
		grace = j.spec.Process.StopTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	var err error
	if j.w != nil {
		if err = j.w.Stop(ctx); err != nil {
			err = fmt.Errorf("stop job %s: %w", j.spec.ID, err)
		}
	}
	e.unwatch(j)
	if j.group != nil {
		if derr := j.group.Delete(ctx); derr != nil {
			err = errors.Join(err, fmt.Errorf("remove cgroup of job %s: %w", j.spec.ID, derr))
		}
	}
	if err != nil {
		e.log.Error("stop job", "job_id", j.spec.ID, "error", err)
	} else if j.w != nil {
		e.log.Info("job stopped", "job_id", j.spec.ID)
	}
	// A failed stop keeps the claim until the lease ends. A claim this
	// session may hold (taken, or a claim call whose outcome is unknown)
	// is released; a release that fails is retried by later passes
	// (retryReleases), or the member the job moved to would wait for it
	// as long as this session lives.
	if (j.claimed || j.unsure) && err == nil {
		if rerr := e.source.Release(ctx, j.spec.ID); rerr != nil {
			e.log.Warn("release claim; retrying with backoff", "job_id", j.spec.ID, "error", rerr)
			e.tbl.mu.Lock()
			e.tbl.unreleased[j.spec.ID] = true
			e.tbl.releaseRetries.Failed(j.spec.ID, retry.Claim(), e.clock.Now())
			e.tbl.mu.Unlock()
		}
	}
	e.tbl.remove(j.spec.ID, nil)
	e.logs.Release(j.spec.ID)
	return err
}

// retryReleases releases again, one store call each, the claims whose
// release failed (table.unreleased) and whose retry is due, once no
// entry of the table runs their job. A job that starts is dropped from
// them: its start takes the claim anew (and, with a claim this session
// still holds, re-writes it: startJobs). A release that fails again is
// retried with backoff (retry.Claim: 100 ms doubling to 2 s). It runs on
// the pass's goroutine, before the pass starts any job, so that no
// release can remove a claim a start of this pass took.
func (e *executor) retryReleases(ctx context.Context, starting map[string]bool) {
	e.tbl.mu.Lock()
	now := e.clock.Now()
	var due []string
	for id := range e.tbl.unreleased {
		switch {
		case starting[id] || e.tbl.jobs[id] != nil:
			delete(e.tbl.unreleased, id)
			e.tbl.releaseRetries.Forget(id)
		case e.tbl.releaseRetries.Due(id, now):
			due = append(due, id)
		}
	}
	e.tbl.mu.Unlock()
	for _, id := range due {
		rctx, cancel := context.WithTimeout(ctx, claimTimeout)
		err := e.source.Release(rctx, id)
		cancel()
		e.tbl.mu.Lock()
		if err == nil {
			delete(e.tbl.unreleased, id)
			e.tbl.releaseRetries.Forget(id)
		} else {
			e.tbl.releaseRetries.Failed(id, retry.Claim(), e.clock.Now())
		}
		e.tbl.mu.Unlock()
		if err == nil {
			e.log.Info("claim released after an earlier release failed", "job_id", id)
		}
	}
}

// stopAll stops every job and removes every cgroup the agent made: the
// group nodes and the jobs' and groups' subtrees.
func (e *executor) stopAll(grace time.Duration) error {
	e.settle.wait()
	err := e.stopJobs(e.tbl.all(), grace)
	e.removeUnusedGroups(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, sub := range cgroup.Subtrees() {
		if cerr := e.hier.Cleanup(ctx, sub); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove %s: %w", sub, cerr))
		}
	}
	e.logs.CloseAll()
	return err
}

// fenceAll kills every worker at once, without grace, and forgets every
// job: the agent's membership can no longer be proven, so another member
// may soon claim its jobs (docs/design.md, "Fencing"). It kills first,
// without waiting for anything (a start in progress may hold fenceMu while
// its claim call runs), then takes fenceMu, so that no start can slip in,
// and kills again whatever started meanwhile. It returns an error when a
// job's processes survived; the caller must then keep the lease (its
// claims) and retry.
func (e *executor) fenceAll() error {
	e.fencing.Store(true)
	defer e.fencing.Store(false)
	kill := func() []*job {
		js := e.tbl.all()
		var wg sync.WaitGroup
		for _, j := range js {
			if j.group == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = j.group.Kill(ctx)
			}()
		}
		wg.Wait()
		return js
	}
	kill()
	e.fenceMu.Lock()
	defer e.fenceMu.Unlock()
	js := kill()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, j := range js {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if j.w != nil {
				_ = j.w.Stop(ctx) // nothing left to stop; cancels any restart
			}
			if j.group != nil {
				if err := j.group.Kill(ctx); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("kill job %s: %w", j.spec.ID, err))
					mu.Unlock()
					return // keep the job: it still has processes
				}
				e.unwatch(j)
				_ = j.group.Delete(ctx)
			}
			if e.tbl.remove(j.spec.ID, j) {
				e.logs.Release(j.spec.ID)
			}
		}()
	}
	wg.Wait()
	if len(errs) == 0 {
		// The lease goes, and every claim of it: none is left to release.
		e.tbl.mu.Lock()
		for id := range e.tbl.unreleased {
			delete(e.tbl.unreleased, id)
			e.tbl.releaseRetries.Forget(id)
		}
		e.tbl.mu.Unlock()
	}
	return errors.Join(errs...)
}
