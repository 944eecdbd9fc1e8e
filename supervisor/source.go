package supervisor

import (
	"context"
	"sync"

	"github.com/berthd/berth/assign"
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

// StaticSource is the one-host source: the agent is the only member, it
// speaks the static protocol and its declarations are its `[static]` table
// (KIP-987 static.connectors, static.tasks), so it runs exactly the declared
// jobs that exist in its configuration. It uses the same assign.Compute as a
// cluster leader does.
type StaticSource struct {
	mu         sync.Mutex
	member     assign.Member
	connectors []assign.Connector
	generation int64
	changed    chan struct{}
}

// NewStaticSource returns a source for the given member and workload.
func NewStaticSource(m assign.Member, connectors []assign.Connector) *StaticSource {
	s := &StaticSource{changed: make(chan struct{}, 1)}
	s.Set(m, connectors)
	return s
}

// Set replaces the declarations and workload (on reload) and signals Changed.
func (s *StaticSource) Set(m assign.Member, connectors []assign.Connector) {
	s.mu.Lock()
	s.member, s.connectors = m, connectors
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
	return Desired{Generation: s.generation, Jobs: a.Members[s.member.ID], Unassigned: a.Unassigned}, nil
}

// Changed implements Source.
func (s *StaticSource) Changed() <-chan struct{} { return s.changed }
