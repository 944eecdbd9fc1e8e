package source

import (
	"context"
	"sync"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/spec"
)

// Desired is what a Source says this agent must run.
type Desired struct {
	// Generation numbers the assignment; it only grows.
	Generation int64
	// Jobs are the job IDs this agent must run, sorted.
	Jobs []string
	// Unassigned counts the jobs no agent runs in the published
	// assignment (its head); the jobs and reasons are in Assignment.
	Unassigned int
	// Workload holds the definitions of this agent's jobs (their
	// connectors and sharing groups), not the whole cluster's; nil: none
	// known yet. The whole stored workload is Source.Workload.
	Workload *spec.Workload
	// Targets maps a connector to the target state an operator set (pause,
	// resume, stop); a connector absent here runs.
	Targets map[string]cluster.Target
	// Restarts maps a job ID to its pending restart request; the agent
	// that runs the job carries it out once and calls RestartDone.
	Restarts map[string]cluster.RestartRequest
}

// State is where an agent stands as a cluster member.
type State string

// Member states, as GET /v1/agent and berth_member_up report them.
const (
	Joining State = "joining" // not (yet, or again) a member: no session
	Member  State = "member"  // a live session: jobs may be claimed and run
	Fenced  State = "fenced"  // the session was lost; every worker was killed
)

// Info is the agent as a member of its cluster.
type Info struct {
	ID         string
	State      State
	Leader     bool
	Generation int64
	// Conflicts counts jobs declared by more than one member in the
	// published assignment (KIP-987 static; the lowest member ID wins).
	Conflicts int
	// LastRenewal is when the last successful renewal of the session's
	// lease was sent (cluster.Session.LastRenewal): the store cannot expire
	// the lease before LastRenewal + the session TTL. Zero while the agent
	// holds no session, and always for a static source (no lease).
	LastRenewal time.Time
	// Deadline is the local fencing deadline (cluster.Session.Deadline):
	// LastRenewal + TTL - max(1 s, TTL/5); without a renewal by then every
	// worker is killed. Zero when LastRenewal is.
	Deadline time.Time
	// Fencings counts the losses of membership the agent has fenced since
	// the source started.
	Fencings uint64
}

// Loss is one loss of the agent's membership: its session's lease can no
// longer be proven, so another member may soon claim its jobs. The agent
// kills every worker at once (fencing) and then calls Fenced; only then
// does the source join again (as etcd's concurrency.Session.Done tells a
// session's end, a Loss is a value received from Source.Lost, never a
// callback).
type Loss struct {
	// Member is the agent's member ID.
	Member string
	// LastRenewal is when the last successful renewal of the lost lease
	// was sent: the store may expire the lease at LastRenewal + TTL.
	LastRenewal time.Time
	// TTL is the lease's time to live.
	TTL time.Duration
	// Err is why the session ended, as the session reports it.
	Err error

	fenced chan struct{}
	once   *sync.Once
}

// NewLoss returns a Loss of member's session (for sources other than
// Cluster, and tests).
func NewLoss(member string, lastRenewal time.Time, ttl time.Duration, err error) Loss {
	return Loss{Member: member, LastRenewal: lastRenewal, TTL: ttl, Err: err, fenced: make(chan struct{}), once: &sync.Once{}}
}

// Fenced tells the source that every worker of the agent is gone: it may
// join the cluster again. Calling it more than once is harmless.
func (l Loss) Fenced() { l.once.Do(func() { close(l.fenced) }) }

// Done is closed once Fenced has been called.
func (l Loss) Done() <-chan struct{} { return l.fenced }

// Source tells an agent which jobs are its to run and holds their claims.
// Every method may be called from any goroutine.
type Source interface {
	// Desired returns the current assignment; cheap, called on every
	// reconcile.
	Desired() Desired
	// Changed is signalled (never closed) whenever Desired may have changed.
	Changed() <-chan struct{}
	// ClaimMany takes the claims of jobs in as few store requests as the
	// store's limits allow: won lists the claims that are now this
	// agent's, each with the store revision at which this call wrote it
	// (the fencing token of the job's next run, docs/fencing.md; 0: it
	// already was ours and renew, nil for none, did not name its job, so
	// it was not written); held maps every other job to the member that
	// holds it. On an error a job in neither result may or may not be
	// claimed: claim it again. It returns an error when the agent is not
	// a member.
	ClaimMany(ctx context.Context, jobs []string, renew func(job string) bool) (won []cluster.Claimed, held map[string]string, err error)
	// RenewClaim re-writes the claim of job this agent holds, only while
	// it holds it, and says at which revision: the fencing token of the
	// job's next run under that claim (a restart by its policy). It
	// returns an error wrapping cluster.ErrClaimLost when the claim is not
	// this agent's, and another when the agent is not a member or the
	// store fails.
	RenewClaim(ctx context.Context, job string) (cluster.Claimed, error)
	// Release gives a claim up; called only once no process of the job is
	// left. It returns a store error.
	Release(ctx context.Context, job string) error
	// RestartDone removes restart request r (from Desired.Restarts) once it
	// has been carried out; a later request for the same job is kept. It
	// returns a store error.
	RestartDone(ctx context.Context, r cluster.RestartRequest) error
	// Lost delivers a Loss each time the agent's membership is lost. The
	// source does not join again until the Loss's Fenced is called.
	Lost() <-chan Loss
}

// memberOf is the agent's own member record: its [static] declarations.
func memberOf(cfg *config.Config) assign.Member {
	return assign.Member{
		ID:         cfg.Agent.ID,
		Protocol:   cfg.Cluster.Protocol,
		Connectors: cfg.Static.Connectors,
		Tasks:      cfg.Static.Tasks,
	}
}

// signal wakes the reader of ch without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
