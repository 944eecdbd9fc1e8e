package supervisor

import (
	"context"
	"sync"
	"time"

	"github.com/berthd/berth/supervisor/plan"
	"github.com/berthd/berth/worker"
)

// discardTimeout bounds the kill and removal of one discarded run's cgroup.
const discardTimeout = 30 * time.Second

// discard carries out the plan's discards, the runs all at once: each
// inherited run no job takes is killed with its cgroup, which is removed,
// and the guard forgets it; each inherited wait no job takes has its note
// dropped (the job is gone, changed, held, or has a run).
func (e *executor) discard(ctx context.Context, ds []plan.Discard) {
	var wg sync.WaitGroup
	for _, d := range ds {
		if d.Wait != nil {
			e.dropWait(d.ID, d.Reason)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.killInherited(ctx, *d.Run, d.Reason)
		}()
	}
	wg.Wait()
}

// discardLaunch discards what l inherited when its job does not start
// here after all, for why: plan.DiscardGone when no claim of this agent
// covers it (the claim is another member's or could not be taken, a fence
// began), plan.DiscardNotStarted when its cgroup could not be made. While
// the agent stops (ctx ended) nothing is discarded: the stop's clean-up
// kills the runs, or the next agent adopts them.
func (e *executor) discardLaunch(ctx context.Context, l launch, why plan.DiscardReason) {
	if ctx.Err() != nil {
		return
	}
	switch {
	case l.run != nil:
		e.killInherited(ctx, *l.run, why)
	case l.wait != nil:
		e.dropWait(l.job.ID, why)
	}
}

// killInherited kills the cgroup of run a, an earlier agent's, and
// removes it; the guard forgets the run first, and its log pipe is
// closed.
func (e *executor) killInherited(ctx context.Context, a worker.Adoptable, why plan.DiscardReason) {
	a.Logr.Close()
	if e.spawner != nil {
		e.spawner.Forget(a.Run)
	}
	g, err := e.hier.Load(a.Run.Cgroup)
	if err == nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), discardTimeout)
		err = g.Kill(kctx)
		if err == nil {
			err = g.Delete(kctx)
		}
		cancel()
	}
	attrs := []any{"job_id", a.Run.JobID, "pid", a.Run.PID, "cgroup", a.Run.Cgroup}
	switch {
	case err != nil:
		e.log.Error("kill a run of an earlier agent", append(attrs, "reason", why.String(), "error", err)...)
	case why == plan.DiscardGone:
		e.log.Warn("killed a run of an earlier agent that no claim of this one covers", attrs...)
	case why == plan.DiscardChanged:
		e.log.Info("killed a run of an earlier agent: the job's command changed, it starts anew", attrs...)
	default:
		e.log.Warn("killed a run of an earlier agent", append(attrs, "reason", why.String())...)
	}
}

// dropWait drops the note of job id's inherited restart wait.
func (e *executor) dropWait(id string, why plan.DiscardReason) {
	if e.notes != nil {
		e.notes.Done(id)
	}
	e.log.Info("a restart wait of an earlier agent is not carried on", "job_id", id, "reason", why.String())
}
