package source

import (
	"context"
	"sync"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
)

// Static is a one-host source without a store: the agent is the only
// member, it speaks the static protocol and its declarations are its
// [static] table (KIP-987 static.connectors, static.tasks), so it runs
// exactly the declared jobs that exist in its file. It uses the same
// assign.Compute as a cluster leader does; claims always succeed.
type Static struct {
	mu         sync.Mutex
	member     assign.Member
	workload   *config.Workload
	connectors []assign.Connector
	generation int64
	started    time.Time
	changed    chan struct{}
}

// NewStatic returns a static source for the file's member record and
// workload.
func NewStatic(cfg *config.Config) *Static {
	s := &Static{changed: make(chan struct{}, 1), started: time.Now().UTC()}
	s.set(cfg)
	return s
}

// set replaces the declarations and workload and signals Changed.
func (s *Static) set(cfg *config.Config) {
	s.mu.Lock()
	wl := cfg.Workload
	s.member, s.workload, s.connectors = memberOf(cfg), &wl, assignConnectors(&wl)
	s.generation++
	s.mu.Unlock()
	signal(s.changed)
}

// Start implements Source: nothing to join.
func (s *Static) Start(context.Context, Env) error { return nil }

// Reload implements Source: the file's workload and [static] table replace
// the old ones; it never fails.
func (s *Static) Reload(_ context.Context, cfg *config.Config) error {
	s.set(cfg)
	return nil
}

func (s *Static) compute() assign.Assignment {
	return assign.Compute(assign.Input{Members: []assign.Member{s.member}, Connectors: s.connectors})
}

// Desired implements Source: the one-member assignment.
func (s *Static) Desired() Desired {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.compute()
	return Desired{Generation: s.generation, Jobs: a.Members[s.member.ID], Unassigned: a.Unassigned,
		Owners: owners(a), Workload: s.workload}
}

// Changed implements Source.
func (s *Static) Changed() <-chan struct{} { return s.changed }

// Claim implements Source: the only member always holds every claim.
func (s *Static) Claim(context.Context, string) (bool, string, error) {
	return true, s.Info().ID, nil
}

// Release implements Source: nothing to release.
func (s *Static) Release(context.Context, string) error { return nil }

// Info implements Source: the one member, always in, always leader.
func (s *Static) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Info{ID: s.member.ID, State: Member, Leader: true, Generation: s.generation, Conflicts: len(s.compute().Conflicts)}
}

// Members implements Source: this agent alone.
func (s *Static) Members(context.Context) ([]cluster.MemberRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.member
	return []cluster.MemberRecord{{ID: m.ID, Protocol: m.Protocol, Connectors: m.Connectors, Tasks: m.Tasks, Started: s.started}}, nil
}

// Published implements Source.
func (s *Static) Published() cluster.Published {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cluster.Published{Generation: s.generation, Leader: s.member.ID, Assignment: s.compute()}
}

// Stopping implements Source: nothing to fence.
func (s *Static) Stopping() {}

// Close implements Source: nothing to leave.
func (s *Static) Close() {}

// assignConnectors is the workload as assignment sees it.
func assignConnectors(wl *config.Workload) []assign.Connector {
	out := make([]assign.Connector, 0, len(wl.Connectors))
	for _, c := range wl.Connectors {
		out = append(out, assign.Connector{Name: c.Name, Run: c.Run != nil, Tasks: c.Tasks, Group: c.Group})
	}
	return out
}

// owners maps every assigned job to its member.
func owners(a assign.Assignment) map[string]string {
	out := map[string]string{}
	for member, jobs := range a.Members {
		for _, j := range jobs {
			out[j] = member
		}
	}
	return out
}

// signal wakes the reader of ch without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
