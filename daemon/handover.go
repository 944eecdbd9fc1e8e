package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/handover"
	"github.com/berthd/berth/source"
)

// noteAdopted records for GET /v1/agent what this agent adopted of what
// it inherited (in), once the first reconcile has decided every run: the
// supervisor's count of runs taken over. Nothing is recorded when the
// guard held no run, unless a hand-over started this image: berth
// upgrade waits for the record (0 of 0 when the old image ran no job).
func (a *Agent) noteAdopted(in *handover.Inherited, adopted int) {
	if in.Held == 0 && !a.handedOver {
		return
	}
	a.mu.Lock()
	a.adoption = &api.Adoption{At: in.At, Held: in.Held, Adopted: adopted}
	a.mu.Unlock()
	a.log.Info("adopted the runs of an earlier agent", "held", in.Held, "adopted", adopted, "after", time.Since(in.At).Round(time.Millisecond))
}

// handOverWait bounds what a hand-over waits for before the exec: the
// renewal of the session's lease and the lease guard's acknowledgement of
// its deadline. A store that changes leader answers within it (etcd
// elects one in 1–2 s with its default 1 s election timeout); one that
// does not, or a guard that does not answer, refuses the hand-over, so
// that berth upgrade says why within 5 s (C36) and this agent goes on.
const handOverWait = 3 * time.Second

// PrepareHandOver readies this agent for its replacement by a new program
// with the same pid (berth upgrade): it renews the session's lease at once
// and has the lease guard acknowledge the deadline of that renewal, so
// that the new program has the whole session TTL (less the fencing
// margin) to resume the session before the guard would kill the jobs.
// Both together wait at most handOverWait (and ctx); nothing else on the
// way to the exec talks to the store: the guard holds the runs, the new
// program resumes the session and its claims.
// Errors: the file names another data_dir or cgroup_root (checkIdentity),
// the agent is not a member (joining, or fenced: its session was lost and
// its jobs killed; the new program would have nothing to adopt), the
// renewal failed or the session ended meanwhile, or the guard did not
// acknowledge in time; the caller then refuses the hand-over (this agent
// goes on).
func (a *Agent) PrepareHandOver(ctx context.Context) error {
	select {
	case <-a.started:
	default:
		return errors.New("the agent has not joined the cluster yet")
	}
	if err := a.checkIdentity(); err != nil {
		return err
	}
	if st := a.src.Info().State; st != source.Member {
		return fmt.Errorf("the agent is %s, not a member (a lost session fences every job and joins again): try again once it is a member", st)
	}
	ctx, cancel := context.WithTimeout(ctx, handOverWait)
	defer cancel()
	start := a.clock.Now()
	d, err := a.src.RenewNow(ctx)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && a.clock.Since(start) >= handOverWait {
			return fmt.Errorf("renew the session before the hand-over: the store did not answer within %s: %w", handOverWait, err)
		}
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
