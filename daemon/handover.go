package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/handover"
)

// noteAdopted records for GET /v1/agent what this agent adopted of what
// it inherited (in), once the first reconcile has decided every run: the
// supervisor's count of runs taken over.
func (a *Agent) noteAdopted(in *handover.Inherited, adopted int) {
	if in.Held == 0 {
		return
	}
	a.mu.Lock()
	a.adoption = &api.Adoption{At: in.At, Held: in.Held, Adopted: adopted}
	a.mu.Unlock()
	a.log.Info("adopted the runs of an earlier agent", "held", in.Held, "adopted", adopted, "after", time.Since(in.At).Round(time.Millisecond))
}

// PrepareHandOver readies this agent for its replacement by a new program
// with the same pid (berth upgrade): it renews the session's lease at once
// and has the lease guard acknowledge the deadline of that renewal, so
// that the new program has the whole session TTL (less the fencing
// margin) to resume the session before the guard would kill the jobs.
// Errors: the file names another data_dir or cgroup_root (checkIdentity),
// no session, the renewal failed, or the guard did not acknowledge
// within ctx; the caller then refuses the hand-over (this agent goes on).
func (a *Agent) PrepareHandOver(ctx context.Context) error {
	select {
	case <-a.started:
	default:
		return errors.New("the agent has not joined the cluster yet")
	}
	if err := a.checkIdentity(); err != nil {
		return err
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
	if err := a.notes.Flush(); err != nil {
		return fmt.Errorf("before the hand-over: %w", err)
	}
	// So is the usage history (berth recommend): the new program reads
	// it. A history not saved costs samples, not jobs: logged only.
	<-a.usageRead // not a half-read history over the file
	if err := a.usage.Save(); err != nil {
		a.log.Warn("usage history not saved before the hand-over", "error", err)
	}
	return nil
}

// HandOverRefused records that this agent refused a hand-over (why), for
// GET /v1/agent: berth upgrade answers with the reason as soon as it
// appears.
func (a *Agent) HandOverRefused(why error) {
	a.mu.Lock()
	a.refused = &api.HandOverRefusal{At: a.clock.Now(), Reason: why.Error()}
	a.mu.Unlock()
}
