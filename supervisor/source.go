package supervisor

import (
	"context"
	"sync"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/limits"
)

// Desired is what a Source says this agent must run.
type Desired struct {
	// Generation numbers the assignment; it only grows. A static source
	// raises it on every reload.
	Generation int64
	// Jobs are the job IDs this agent must run, sorted.
	Jobs []string
	// Unassigned maps a job ID that no agent runs to the reason, for status.
	Unassigned map[string]string
	// Owners maps every assigned job ID to the member (agent ID) that runs
	// it, this agent's jobs included.
	Owners map[string]string
	// Workload holds the definitions of every job; nil: none known yet.
	Workload *limits.Workload
}

// Claimer is implemented by a source whose jobs must be claimed before they
// run and released after they stopped (DESIGN.md: "Before an agent starts a
// job it takes that job's claim").
type Claimer interface {
	// Claim takes the job's claim. ok is false, with the holder's ID, when
	// another member holds it.
	Claim(ctx context.Context, job string) (ok bool, holder string, err error)
	// Release gives the claim up; called once the job's processes are gone.
	Release(ctx context.Context, job string) error
}

// AgentInfo is GET /v1/agent: the agent as a cluster member.
type AgentInfo struct {
	ID         string `json:"id"`
	State      string `json:"state"` // joining | member | fenced
	Leader     bool   `json:"leader"`
	Generation int64  `json:"generation"`
}

// Membership is implemented by a source that can describe the cluster.
type Membership interface {
	Info() AgentInfo
	Members(ctx context.Context) ([]cluster.MemberRecord, error)
	Published() cluster.Published
}

// Source tells the agent which jobs are its to run. The static source reads
// them from the agent's own `[static]` table; the cluster source from the
// assignment the leader publishes in etcd.
type Source interface {
	// Desired returns the current assignment. It is called on every
	// reconcile and must be cheap.
	Desired(ctx context.Context) (Desired, error)
	// Changed is signalled (never closed) whenever Desired may have changed.
	Changed() <-chan struct{}
}

// StaticSource is a one-host source without a store: the agent is the only member, it
// speaks the static protocol and its declarations are its `[static]` table
// (KIP-987 static.connectors, static.tasks), so it runs exactly the declared
// jobs that exist in its configuration. It uses the same assign.Compute as a
// cluster leader does.
type StaticSource struct {
	mu         sync.Mutex
	member     assign.Member
	workload   *limits.Workload
	connectors []assign.Connector
	generation int64
	changed    chan struct{}
}

// NewStaticSource returns a source for the configuration's member record
// and workload.
func NewStaticSource(cfg *limits.Config) *StaticSource {
	s := &StaticSource{changed: make(chan struct{}, 1)}
	s.Set(cfg)
	return s
}

// Set replaces the declarations and workload (on reload) and signals Changed.
func (s *StaticSource) Set(cfg *limits.Config) {
	s.mu.Lock()
	wl := cfg.Workload
	s.member, s.workload, s.connectors = memberOf(cfg), &wl, connectorsOf(&wl)
	s.generation++
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Desired computes the one-member assignment.
func (s *StaticSource) Desired(context.Context) (Desired, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := assign.Compute(assign.Input{
		Members:    []assign.Member{s.member},
		Connectors: s.connectors,
	})
	return Desired{Generation: s.generation, Jobs: a.Members[s.member.ID], Unassigned: a.Unassigned,
		Owners: owners(a), Workload: s.workload}, nil
}

// Info implements Membership: the one member, always in.
func (s *StaticSource) Info() AgentInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return AgentInfo{ID: s.member.ID, State: StateMember, Leader: true, Generation: s.generation}
}

// Members implements Membership.
func (s *StaticSource) Members(context.Context) ([]cluster.MemberRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.member
	return []cluster.MemberRecord{{ID: m.ID, Protocol: m.Protocol, Connectors: m.Connectors, Tasks: m.Tasks, Started: started}}, nil
}

// Published implements Membership.
func (s *StaticSource) Published() cluster.Published {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := assign.Compute(assign.Input{Members: []assign.Member{s.member}, Connectors: s.connectors})
	return cluster.Published{Generation: s.generation, Leader: s.member.ID, Assignment: a}
}

var started = time.Now().UTC()

// Changed implements Source.
func (s *StaticSource) Changed() <-chan struct{} { return s.changed }
