package source

import (
	"context"
	"log/slog"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
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
	Workload *config.Workload
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
}

// Env is what a Source needs of the agent that runs it.
type Env struct {
	// Log receives the source's structured log.
	Log *slog.Logger
	// Addr is the agent's API address other members reach it at: host:port,
	// or https://host:port when it serves TLS.
	Addr string
	// Fence kills every worker of the agent now, without grace. It returns
	// an error when a job's processes survived; the source then keeps its
	// lease (its claims) and calls Fence again.
	Fence func() error
	// OnFence, when set, is called after each completed fencing.
	OnFence func()
	// OnRenew, when set, is told the round-trip time of every successful
	// lease renewal. It must not block.
	OnRenew func(time.Duration)
	// OnDeadline, when set, is told the session's local fencing deadline
	// (cluster.Session.Deadline: last renewal sent + TTL − max(1 s,
	// TTL/5)) when a session is made and after every successful renewal,
	// before any job is claimed under it. It must not block.
	OnDeadline func(time.Time)
	// StoreFailed, when set, is called when the store the source runs
	// inside the agent's process (the embedded etcd) cannot go on — its
	// WAL cannot be created, a commit to its database failed: a full or
	// broken data_dir — with the store's reason. The process exits with
	// status 1 when it returns.
	StoreFailed func(error)
}

// Source tells an agent which jobs are its to run. Every method but Start
// may be called from any goroutine once Start has returned.
type Source interface {
	// Start makes the source ready to answer: a cluster member joins
	// (retrying while the store is away) and starts following the
	// assignment; a static source returns at once. It returns an error
	// when ctx ends first or the store can never be used (bad TLS files).
	Start(ctx context.Context, env Env) error
	// Desired returns the current assignment; cheap, called on every
	// reconcile.
	Desired() Desired
	// Changed is signalled (never closed) whenever Desired may have changed.
	Changed() <-chan struct{}
	// Claim takes a job's claim before it is started. ok is false, with
	// the holder's ID, when another member holds it.
	Claim(ctx context.Context, job string) (ok bool, holder string, err error)
	// ClaimMany takes the claims of jobs in as few store requests as the
	// store's limits allow: won lists the jobs whose claims are now this
	// agent's; held maps every other job to the member that holds it. On
	// an error a job in neither result may or may not be claimed: claim it
	// again.
	ClaimMany(ctx context.Context, jobs []string) (won []string, held map[string]string, err error)
	// Release gives a claim up; called only once no process of the job is
	// left.
	Release(ctx context.Context, job string) error
	// Reload puts a re-read agent file in force: its workload is stored
	// (create or update) and its [static] table becomes the member record.
	// An error refuses the reload and changes nothing.
	Reload(ctx context.Context, cfg *config.Config) error
	// SetTarget stores connector's target state for every agent that runs
	// one of its jobs. It returns an error wrapping cluster.ErrNotFound
	// when the connector does not exist, or a store error.
	SetTarget(ctx context.Context, connector string, t cluster.Target) error
	// RequestRestarts stores a restart request for each of jobs of
	// connector (KIP-745; onlyFailed: only if FAILED when handled). Errors
	// as SetTarget.
	RequestRestarts(ctx context.Context, connector string, jobs []string, onlyFailed bool, by string) error
	// RestartDone removes request r once it has been carried out; a later
	// request for the same job is kept. It returns a store error.
	RestartDone(ctx context.Context, r cluster.RestartRequest) error
	// Info describes the agent as a member.
	Info() Info
	// Members lists the live members, read from the store page by page.
	Members(ctx context.Context) ([]cluster.MemberRecord, error)
	// Assignment reads the whole published assignment from the store, page
	// by page at one revision: data proportional to the cluster, for
	// cluster-wide views (/v1/assignment, Connect status), never for the
	// agent's own work. It returns a store error.
	Assignment(ctx context.Context) (cluster.Published, error)
	// Workload reads every stored connector and sharing group, page by
	// page: the cluster-wide workload, for views (GET /connectors). It
	// returns a store error; definitions that do not parse here are left
	// out (workload.Parse), as the agents that would run them leave them.
	Workload(ctx context.Context) (*config.Workload, error)
	// Definitions reads the stored definitions of the named connectors and
	// of the sharing groups they name, by key (cluster.Client.Definitions):
	// data proportional to the names, for checking the [static] table
	// against the store. Names not stored, or invalid as names, are left
	// out. It returns a store error.
	Definitions(ctx context.Context, connectors []string) (*config.Workload, error)
	// Stopping tells the source the agent is stopping: a session lost from
	// now on is fenced, but not joined again.
	Stopping()
	// Close leaves the cluster (its claims go with its lease) and waits for
	// every goroutine of the source.
	Close()
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
