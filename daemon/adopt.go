package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/guard"
	"github.com/berthd/berth/worker"
	"golang.org/x/sys/unix"
)

// adoption is what a starting agent takes over from an earlier one: the
// runs the lease guard holds whose processes pass every identity check
// (guard.HeldRun.Verify), offered to the workers of their jobs.
type adoption struct {
	offered []worker.Adoptable
	// keep names the job cgroups of the offered runs, spared by the
	// start-up's clean-up of leftovers.
	keep map[string]bool
	// at is when the runs were listed; held how many the guard held.
	at   time.Time
	held int
}

// adoptable lists the runs g holds and checks each one's identity. A run
// that fails a check is forgotten by the guard; its cgroup is then
// cleaned up with the other leftovers, which kills it. An error listing
// leaves nothing to adopt (every leftover is killed, as before live
// restart).
func (a *Agent) adoptable(ctx context.Context, g *guard.Client) adoption {
	ad := adoption{keep: map[string]bool{}, at: time.Now()}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	held, err := g.Held(lctx)
	if err != nil {
		a.log.Error("list the runs the lease guard holds: none adopted; every leftover is killed", "error", err)
		return ad
	}
	// One run per job: the newest that still runs, else the newest (a
	// second one is left by a crash between a run's end and its record's
	// removal). The others are ended: a process of one is the guard's
	// unreaped child, so its pid names it.
	best := map[string]int{}
	for i, h := range held {
		j, ok := best[h.JobID]
		if !ok || newer(h, held[j]) {
			best[h.JobID] = i
		}
	}
	for i, h := range held {
		if best[h.JobID] != i {
			if !h.Exited && h.Verify() == nil {
				_ = unix.Kill(h.PID, unix.SIGKILL)
			}
			a.log.Warn("a second run of a job held by the lease guard: killed", "job_id", h.JobID, "run", h.ID, "pid", h.PID, "kept", held[best[h.JobID]].ID)
			h.Logr.Close()
			g.Forget(h.Run)
			continue
		}
		if err := h.Verify(); err != nil {
			a.log.Warn("a run the lease guard holds fails its identity check: killed with the leftovers", "job_id", h.JobID, "run", h.ID, "error", err)
			h.Logr.Close()
			g.Forget(h.Run)
			continue
		}
		ad.offered = append(ad.offered, worker.Adoptable{Run: h.Run, Logr: h.Logr})
		ad.keep[h.Cgroup] = true
	}
	ad.held = len(held)
	if len(held) > 0 {
		a.log.Info("runs of an earlier agent held by the lease guard", "held", len(held), "adoptable", len(ad.offered))
	}
	return ad
}

// killUnadopted kills the cgroup of every offered run no worker took once
// the first reconcile is done: no claim of this agent covers its job.
func (a *Agent) killUnadopted(ctx context.Context, rt *worker.Runtime, hier *cgroup.Hierarchy) {
	for _, u := range rt.Unadopted() {
		u.Logr.Close()
		a.guard.Forget(u.Run)
		g, err := hier.Load(u.Run.Cgroup)
		if err == nil {
			kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = g.Kill(kctx)
			if err == nil {
				err = g.Delete(kctx)
			}
			cancel()
		}
		if err != nil {
			a.log.Error("kill a run no claim covers", "job_id", u.Run.JobID, "pid", u.Run.PID, "cgroup", u.Run.Cgroup, "error", err)
			continue
		}
		a.log.Warn("killed a run of an earlier agent that no claim of this one covers", "job_id", u.Run.JobID, "pid", u.Run.PID, "cgroup", u.Run.Cgroup)
	}
}

// noteAdopted records for GET /v1/agent what this agent adopted (once the
// first reconcile has given every offered run its chance).
func (a *Agent) noteAdopted(ad adoption, rt *worker.Runtime) {
	if ad.held == 0 {
		return
	}
	n := rt.Adopted()
	a.mu.Lock()
	a.adoption = &api.Adoption{At: ad.at, Held: ad.held, Adopted: n}
	a.mu.Unlock()
	a.log.Info("adopted the runs of an earlier agent", "held", ad.held, "adopted", n, "after", time.Since(ad.at).Round(time.Millisecond))
}

// PrepareHandOver readies this agent for its replacement by a new program
// with the same pid (berth upgrade): it renews the session's lease at once
// and has the lease guard acknowledge the deadline of that renewal, so
// that the new program has the whole session TTL (less the fencing
// margin) to resume the session before the guard would kill the jobs.
// Errors: no session, the renewal failed, or the guard did not acknowledge
// within ctx; the caller then refuses the hand-over (this agent goes on).
func (a *Agent) PrepareHandOver(ctx context.Context) error {
	select {
	case <-a.started:
	default:
		return errors.New("the agent has not joined the cluster yet")
	}
	d, err := a.src.RenewNow(ctx)
	if err != nil {
		return fmt.Errorf("renew the session before the hand-over: %w", err)
	}
	if err := a.guard.DeadlineSync(ctx, d.Add(guardLag(a.Config().Cluster.SessionTTL))); err != nil {
		return fmt.Errorf("before the hand-over: %w", err)
	}
	// The jobs waiting to restart are saved as they are now: the exec
	// ends the writer's goroutine with the old image.
	if err := a.notes.flush(); err != nil {
		return fmt.Errorf("before the hand-over: %w", err)
	}
	return nil
}

// newer reports whether run a is to be kept over run b of the same job:
// one that runs over one that exited, then the later start.
func newer(a, b guard.HeldRun) bool {
	if a.Exited != b.Exited {
		return !a.Exited
	}
	return a.StartedAt.After(b.StartedAt)
}
