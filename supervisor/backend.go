package supervisor

import (
	"context"
	"errors"
	"os"
	"path"
	"sort"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/metrics"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/worker"
)

// This file is how the API (api.Backend) and the metrics collectors
// (metrics.Lister, metrics.ClusterState) see the agent.

var (
	_ api.Backend          = (*Agent)(nil)
	_ metrics.Lister       = (*Agent)(nil)
	_ metrics.ClusterState = (*Agent)(nil)
)

// state is the job's state and why, as API and metrics report it.
func (j *job) state() (worker.Status, string) {
	switch {
	case j.restarting:
		return worker.Status{State: worker.Restarting}, "restart requested"
	case j.held == config.TargetPaused:
		return worker.Status{State: worker.Paused}, heldReason("paused", j.heldBy, j.heldAt)
	case j.held == config.TargetStopped:
		return worker.Status{State: worker.Stopped}, heldReason("stopped", j.heldBy, j.heldAt)
	case j.holder != "":
		reason := "claim held by " + j.holder
		if j.err != "" {
			reason = j.err
		}
		return worker.Status{State: worker.Waiting}, reason
	case j.w == nil:
		return worker.Status{State: worker.Failed}, j.err
	}
	st := j.w.Status()
	return st, st.Reason
}

// heldReason says who paused or stopped a job and when.
func heldReason(what, by string, at time.Time) string {
	r := what
	if by != "" {
		r += " by " + by
	}
	if !at.IsZero() {
		r += " at " + at.UTC().Format(time.RFC3339)
	}
	return r
}

// snapshotJobs returns the agent's jobs sorted by ID.
func (a *Agent) snapshotJobs() []*job {
	a.mu.RLock()
	js := make([]*job, 0, len(a.jobs))
	for _, j := range a.jobs {
		js = append(js, j)
	}
	a.mu.RUnlock()
	sort.Slice(js, func(i, k int) bool { return js[i].spec.ID < js[k].spec.ID })
	return js
}

// Jobs implements api.Backend: every job this agent runs, sorted by ID.
func (a *Agent) Jobs() []api.Job {
	js := a.snapshotJobs()
	out := make([]api.Job, 0, len(js))
	for _, j := range js {
		out = append(out, a.jobInfo(j))
	}
	return out
}

// Job implements api.Backend.
func (a *Agent) Job(id string) (api.Job, bool) {
	a.mu.RLock()
	j := a.jobs[id]
	a.mu.RUnlock()
	if j == nil {
		return api.Job{}, false
	}
	return a.jobInfo(j), true
}

func (a *Agent) jobInfo(j *job) api.Job {
	a.mu.RLock()
	spec := j.spec
	a.mu.RUnlock()
	info := api.Job{
		ID:        spec.ID,
		Connector: spec.Connector,
		Kind:      string(spec.Kind),
		Group:     spec.Group,
		Cgroup:    a.cgroupPath(spec),
		Limits:    spec.Process.Limits,
		Command:   spec.Process.Command,
	}
	if spec.Kind == config.KindTask {
		t := spec.Task
		info.Task = &t
	}
	a.mu.RLock()
	st, reason := j.state()
	info.UpdateBlocked = j.updateBlocked()
	a.mu.RUnlock()
	info.State, info.Reason, info.PID, info.Restarts, info.LastExit = st.State, reason, st.PID, st.Restarts, st.LastExit
	if !st.StartedAt.IsZero() {
		t := st.StartedAt
		info.StartedAt = &t
	}
	if !st.NextRestart.IsZero() {
		t := st.NextRestart
		info.NextRestart = &t
	}
	if api.ConnectState(info) == api.StateFailed {
		info.Trace = a.trace(spec.ID, info)
	}
	if j.group != nil {
		if s, err := j.group.FullUsage(); err == nil {
			info.Usage = &api.Usage{
				CPUSeconds:       s.CPUUserSeconds + s.CPUSystemSeconds,
				CPULimitCores:    s.Limits.CPUQuotaCores,
				MemoryBytes:      s.MemoryBytes,
				MemoryLimitBytes: s.Limits.MemoryLimitBytes,
				OOMKills:         s.OOMKills,
				Pids:             s.Pids,
				PidsLimit:        s.Limits.PidsLimit,
				IOReadBytes:      s.IOReadBytes,
				IOWriteBytes:     s.IOWriteBytes,
				Pressure:         pressureOf(j.group),
			}
		}
	}
	return info
}

// AgentInfo implements api.Backend.
func (a *Agent) AgentInfo() api.Agent {
	i := a.source.Info()
	a.mu.RLock()
	conf := a.conf.info(a.path)
	a.mu.RUnlock()
	out := api.Agent{ID: i.ID, State: string(i.State), Leader: i.Leader, Generation: i.Generation, PID: os.Getpid(), Config: conf}
	if !i.LastRenewal.IsZero() {
		r, d := i.LastRenewal, i.Deadline
		out.LastRenewal, out.LeaseDeadline = &r, &d
	}
	return out
}

// Groups implements api.Backend: the sharing groups with jobs here.
func (a *Agent) Groups() []api.Group {
	js := a.snapshotJobs()
	a.mu.RLock()
	nodes := make([]*groupNode, 0, len(a.groups))
	for _, g := range a.groups {
		nodes = append(nodes, g)
	}
	members := map[string][]string{}
	for _, j := range js {
		if j.spec.Group != "" {
			members[j.spec.Group] = append(members[j.spec.Group], j.spec.ID)
		}
	}
	a.mu.RUnlock()
	sort.Slice(nodes, func(i, k int) bool { return nodes[i].name < nodes[k].name })
	out := make([]api.Group, 0, len(nodes))
	for _, g := range nodes {
		a.mu.RLock()
		lim := g.limits
		a.mu.RUnlock()
		ag := api.Group{Name: g.name, Cgroup: path.Join("/", a.hier.Root(), cgroup.GroupRel(g.name)),
			Limits: lim, Jobs: members[g.name]}
		if ag.Jobs == nil {
			ag.Jobs = []string{}
		}
		if s, err := g.group.FullUsage(); err == nil {
			ag.Usage = &api.GroupUsage{
				CPUSeconds:       s.CPUUserSeconds + s.CPUSystemSeconds,
				CPULimitCores:    s.Limits.CPUQuotaCores,
				MemoryBytes:      s.MemoryBytes,
				MemoryLimitBytes: s.Limits.MemoryLimitBytes,
				OOMKills:         s.OOMKills,
				Pids:             s.Pids,
				PidsLimit:        s.Limits.PidsLimit,
				IOReadBytes:      s.IOReadBytes,
				IOWriteBytes:     s.IOWriteBytes,
			}
		}
		out = append(out, ag)
	}
	return out
}

// Reconciled implements api.Backend.
func (a *Agent) Reconciled() bool {
	select {
	case <-a.ready:
		return true
	default:
		return false
	}
}

// Members implements api.Backend.
func (a *Agent) Members(ctx context.Context) ([]api.Member, error) {
	if a.source.Info().State == source.Joining {
		return nil, errors.New("not a member of the cluster yet")
	}
	ms, err := a.source.Members(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, api.Member{ID: m.ID, Protocol: string(m.Protocol), Connectors: m.Connectors, Tasks: m.Tasks, Addr: m.Addr, Started: m.Started})
	}
	return out, nil
}

// Assignment implements api.Backend: the source reads it from the store,
// page by page.
func (a *Agent) Assignment(ctx context.Context) (api.Assignment, error) {
	if a.source.Info().State == source.Joining {
		return api.Assignment{}, api.ErrNotMember
	}
	p, err := a.source.Assignment(ctx)
	if err != nil {
		return api.Assignment{}, err
	}
	out := api.Assignment{Generation: p.Generation, Leader: p.Leader, Members: p.Assignment.Members,
		Unassigned: p.Assignment.Unassigned, Conflicts: []api.Conflict{}}
	for _, c := range p.Assignment.Conflicts {
		out.Conflicts = append(out.Conflicts, api.Conflict{Job: c.Job, Members: c.Members, Winner: c.Winner})
	}
	return out, nil
}

// Workload implements api.Backend: the cluster's stored workload, read
// page by page (an agent holds only the definitions of its own jobs).
func (a *Agent) Workload(ctx context.Context) (*config.Workload, error) {
	return a.source.Workload(ctx)
}

// PeerClient implements api.Backend: a client for another agent's API at
// addr with the [agent.client] credentials in force.
func (a *Agent) PeerClient(addr string) (*api.Client, error) {
	return api.NewClientFor(addr, a.Config().Agent.Client, false)
}

// Snapshot implements metrics.Lister.
func (a *Agent) Snapshot() metrics.Snapshot {
	js := a.snapshotJobs()
	a.mu.RLock()
	s := metrics.Snapshot{Jobs: make([]metrics.Job, 0, len(js)), Assigned: a.assigned,
		Generation: a.desired.Generation, Unassigned: a.desired.Unassigned,
		ReloadSuccessful: a.conf.lastOK, ReloadSuccessTime: a.conf.lastSuccess}
	blocked := make(map[*job]bool, len(js))
	for _, j := range js {
		blocked[j] = j.updateBlocked() != ""
	}
	jobsOf := map[string]int{}
	for _, j := range js {
		if j.spec.Group != "" {
			jobsOf[j.spec.Group]++
		}
	}
	for name, g := range a.groups {
		s.Groups = append(s.Groups, metrics.Group{Name: name, Jobs: jobsOf[name], Cgroup: g.group})
	}
	sort.Slice(s.Groups, func(i, k int) bool { return s.Groups[i].Name < s.Groups[k].Name })
	for _, j := range js {
		st, _ := j.state()
		s.Jobs = append(s.Jobs, metrics.Job{ID: j.spec.ID, Connector: j.spec.Connector, Kind: string(j.spec.Kind),
			Group: j.spec.Group, State: st.State, Restarts: st.Restarts, Cgroup: j.group, UpdateBlocked: blocked[j]})
	}
	a.mu.RUnlock()
	return s
}

// MemberUp implements metrics.ClusterState.
func (a *Agent) MemberUp() bool { return a.source.Info().State == source.Member }

// Conflicts implements metrics.ClusterState.
func (a *Agent) Conflicts() int { return a.source.Info().Conflicts }

// Lease implements metrics.ClusterState.
func (a *Agent) Lease() (lastRenewal, deadline time.Time) {
	i := a.source.Info()
	return i.LastRenewal, i.Deadline
}

// pressureOf is the group's pressure stall information for the API; nil
// when the kernel keeps none for it (cgroup.ErrNoPressure, which the
// pressure collector logs once) or it cannot be read now.
func pressureOf(g *cgroup.Group) *api.Pressure {
	p, err := g.Pressure()
	if err != nil {
		return nil
	}
	stall := func(st cgroup.StallTime) api.Stall {
		s := api.Stall{SomeSeconds: st.SomeSeconds}
		if st.HasFull {
			full := st.FullSeconds
			s.FullSeconds = &full
		}
		return s
	}
	return &api.Pressure{CPU: stall(p.CPU), Memory: stall(p.Memory), IO: stall(p.IO)}
}

// updateBlocked says why the job does not run its definition in force as
// a whole: its new definition cannot start here (blocked), or the kernel
// refused some of its limits (refused); "" when neither. a.mu is held.
func (j *job) updateBlocked() string {
	switch {
	case j.blocked != "" && j.refused != "":
		return j.blocked + "; " + j.refused
	case j.blocked != "":
		return j.blocked
	}
	return j.refused
}
