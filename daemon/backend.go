package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/metrics"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/supervisor"
	"github.com/berthd/berth/workload"
)

// backend is the agent as its HTTP API (api.Backend) and its metrics
// (metrics.Lister) see it: it reads the supervisor's View, the source's
// Info and Desired, and the cluster's store directly, and converts them
// into the API's and the metrics' own types. It holds no state of its
// own; the agent it reads is ag.
type backend struct {
	ag *Agent
}

var (
	_ api.Backend    = (*backend)(nil)
	_ metrics.Lister = (*backend)(nil)
)

// started reports whether the supervisor and the source are set (Run has
// joined and started the supervisor).
func (b *backend) started() bool {
	select {
	case <-b.ag.started:
		return true
	default:
		return false
	}
}

// view is the supervisor's view; empty before it runs.
func (b *backend) view() supervisor.View {
	if !b.started() {
		return supervisor.View{}
	}
	return b.ag.sup.View()
}

// info is the source's membership; joining before Run made it.
func (b *backend) info() source.Info {
	if !b.started() {
		return source.Info{ID: b.ag.Config().Agent.ID, State: source.Joining}
	}
	return b.ag.src.Info()
}

// Jobs implements api.Backend: every job this agent runs, sorted by ID.
// Each job's cgroup is read now (jobInfo: about ten kernel files, a
// millisecond per job here), so the jobs are read by a few goroutines at
// once, two per CPU, each writing its own entries; Jobs waits for them.
// At 10,000 jobs one sequential read took 11 s on 2 CPUs, longer than the
// CLI's 10 s request timeout.
func (b *backend) Jobs() []api.Job {
	v := b.view()
	logDir := b.ag.Config().Agent.LogDir
	out := make([]api.Job, len(v.Jobs))
	readers := min(len(v.Jobs)/jobsPerReader+1, 2*runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() {
			for i := r; i < len(v.Jobs); i += readers {
				out[i] = jobInfo(v.Jobs[i], logDir)
			}
		})
	}
	wg.Wait()
	return out
}

// jobsPerReader is how many jobs make another reader of Jobs worth its
// goroutine.
const jobsPerReader = 64

// Job implements api.Backend.
func (b *backend) Job(id string) (api.Job, bool) {
	if !b.started() {
		return api.Job{}, false
	}
	j, ok := b.ag.sup.Job(id)
	if !ok {
		return api.Job{}, false
	}
	return jobInfo(j, b.ag.Config().Agent.LogDir), true
}

// jobInfo is j as the API shows it, with its cgroup's usage read now and,
// when it is FAILED, its trace (with the tail of its log in logDir).
func jobInfo(j supervisor.JobView, logDir string) api.Job {
	js, st := j.Spec, j.Status
	info := api.Job{
		ID:            js.ID,
		Connector:     js.Connector,
		Kind:          string(js.Kind),
		Group:         js.Group,
		Cgroup:        j.Cgroup,
		Limits:        js.Process.Limits,
		Command:       js.Process.Command,
		UpdateBlocked: j.UpdateBlocked,
		State:         st.State,
		Reason:        j.Reason,
		PID:           st.PID,
		FencingToken:  st.Token,
		Restarts:      st.Restarts,
		LastExit:      st.LastExit,
	}
	if js.Kind == spec.KindTask {
		t := js.Task
		info.Task = &t
	}
	if !st.StartedAt.IsZero() {
		t := st.StartedAt
		info.StartedAt = &t
	}
	if !st.NextRestart.IsZero() {
		t := st.NextRestart
		info.NextRestart = &t
	}
	if api.ConnectState(info) == api.StateFailed {
		info.Trace = trace(logDir, info)
	}
	if j.Group != nil {
		if u, ok := usageOf(j.Group); ok {
			info.Usage = &api.Usage{GroupUsage: u, Pressure: pressureOf(j.Group)}
		}
	}
	return info
}

// AgentInfo implements api.Backend.
func (b *backend) AgentInfo() api.Agent {
	a := b.ag
	i := b.info()
	conf := a.conf.info(a.path)
	out := api.Agent{ID: i.ID, State: string(i.State), Leader: i.Leader, Generation: i.Generation, PID: os.Getpid(), Config: conf}
	out.Version, out.ImageStarted = a.build[0], a.imageStarted
	a.mu.Lock()
	out.Adoption, out.HandOverRefused = a.adoption, a.refused
	a.mu.Unlock()
	if !i.LastRenewal.IsZero() {
		r, d := i.LastRenewal, i.Deadline
		out.LastRenewal, out.LeaseDeadline = &r, &d
	}
	return out
}

// Groups implements api.Backend: the sharing groups with jobs here.
func (b *backend) Groups() []api.Group {
	v := b.view()
	out := make([]api.Group, 0, len(v.Groups))
	for _, g := range v.Groups {
		ag := api.Group{Name: g.Name, Cgroup: g.Cgroup, Limits: g.Limits, Jobs: g.Jobs}
		if u, ok := usageOf(g.Group); ok {
			ag.Usage = &u
		}
		out = append(out, ag)
	}
	return out
}

// Reconciled implements api.Backend: the agent is a member and its first
// reconcile has finished (Agent.Ready).
func (b *backend) Reconciled() bool {
	select {
	case <-b.ag.ready:
		return true
	default:
		return false
	}
}

// Healthy implements api.Backend: the supervisor's loop is within its
// bound (Agent.Healthy).
func (b *backend) Healthy() bool { return b.ag.Healthy() }

// client is the store client once the agent is a member; an error before.
func (b *backend) client() (*cluster.Client, error) {
	if b.info().State == source.Joining {
		return nil, api.ErrNotMember
	}
	return b.ag.src.Client(), nil
}

// Members implements api.Backend: read from the store, page by page.
func (b *backend) Members(ctx context.Context) ([]api.Member, error) {
	c, err := b.client()
	if err != nil {
		return nil, errors.New("not a member of the cluster yet")
	}
	ms, err := c.Members(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, api.Member{ID: m.ID, Protocol: string(m.Protocol), Connectors: m.Connectors, Tasks: m.Tasks, Addr: m.Addr, Started: m.Started})
	}
	return out, nil
}

// Assignment implements api.Backend: the whole published assignment, read
// from the store page by page at one revision.
func (b *backend) Assignment(ctx context.Context) (api.Assignment, error) {
	c, err := b.client()
	if err != nil {
		return api.Assignment{}, err
	}
	p, err := c.Assignment(ctx)
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

// Workload implements api.Backend: every stored definition, read page by
// page (an agent holds only the definitions of its own jobs); definitions
// that do not parse here are left out (workload.Parse), as the agents that
// would run them leave them.
func (b *backend) Workload(ctx context.Context) (*spec.Workload, error) {
	c, err := b.client()
	if err != nil {
		return nil, err
	}
	conns, err := c.Connectors(ctx)
	if err != nil {
		return nil, err
	}
	groups, err := c.Groups(ctx)
	if err != nil {
		return nil, err
	}
	wl, _ := workload.Parse(conns, groups, b.ag.host)
	return wl, nil
}

// definitions reads by key the stored definitions of the named connectors
// and of the sharing groups they name (data proportional to the names).
// Names not stored, or not one key segment, are left out.
func (b *backend) definitions(ctx context.Context, connectors []string) (*spec.Workload, error) {
	c, err := b.client()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range connectors {
		if n != "" && !strings.ContainsAny(n, "/\x00") {
			names = append(names, n)
		}
	}
	conns, groups, err := c.Definitions(ctx, names)
	if err != nil {
		return nil, err
	}
	wl, _ := workload.Parse(conns, groups, b.ag.host)
	return wl, nil
}

// Target implements api.Backend: the target as the agent's source last
// read it from the store (what the agent is carrying out, or about to).
func (b *backend) Target(connector string) spec.TargetState {
	var d source.Desired
	if b.started() {
		d = b.ag.src.Desired()
	}
	t, ok := d.Targets[connector]
	if !ok || t.State == "" {
		return spec.TargetRunning
	}
	return t.State
}

// SetTarget implements api.Backend: the target is stored in the cluster,
// and every agent, this one included, holds it when it reads it back.
func (b *backend) SetTarget(ctx context.Context, connector string, state spec.TargetState, by string) error {
	c, err := b.client()
	if err != nil {
		return err
	}
	return storeErr(c.SetTarget(ctx, connector, cluster.Target{State: state, By: by, At: b.ag.clock.Now().UTC()}))
}

// RequestRestarts implements api.Backend.
func (b *backend) RequestRestarts(ctx context.Context, connector string, jobs []string, onlyFailed bool, by string) error {
	c, err := b.client()
	if err != nil {
		return err
	}
	return storeErr(c.RequestRestarts(ctx, connector, jobs, onlyFailed, by, b.ag.clock.Now()))
}

// storeErr turns cluster.ErrNotFound into api.ErrNotFound.
func storeErr(err error) error {
	if errors.Is(err, cluster.ErrNotFound) {
		return fmt.Errorf("%w: %w", api.ErrNotFound, err)
	}
	return err
}

// PeerClient implements api.Backend: a client for another agent's API at
// addr with the [agent.client] credentials in force.
func (b *backend) PeerClient(addr string) (*api.Client, error) {
	return api.NewClientFor(addr, b.ag.Config().Agent.Client, false)
}

// Snapshot implements metrics.Lister.
func (b *backend) Snapshot() metrics.Snapshot {
	v := b.view()
	i := b.info()
	ok, at := b.ag.conf.lastReload()
	s := metrics.Snapshot{Jobs: make([]metrics.Job, 0, len(v.Jobs)), Assigned: v.Assigned,
		Generation: v.Desired.Generation, Unassigned: v.Desired.Unassigned,
		ReloadSuccessful: ok, ReloadSuccessTime: at,
		Membership: metrics.Membership{Up: i.State == source.Member, Conflicts: i.Conflicts, Fencings: i.Fencings,
			LastRenewal: i.LastRenewal, Deadline: i.Deadline}}
	for _, g := range v.Groups {
		s.Groups = append(s.Groups, metrics.Group{Name: g.Name, Jobs: len(g.Jobs), Cgroup: g.Group})
	}
	for _, j := range v.Jobs {
		s.Jobs = append(s.Jobs, metrics.Job{ID: j.Spec.ID, Connector: j.Spec.Connector, Kind: string(j.Spec.Kind),
			Group: j.Spec.Group, State: j.Status.State, Restarts: j.Status.Restarts, Cgroup: j.Group, UpdateBlocked: j.UpdateBlocked != "",
			PressureRestarts: j.PressureRestarts, PressureNotified: j.PressureNotified})
	}
	return s
}

// usageOf is cgroup g's accounting and limits as the API shows them, read
// now (cgroup.Group.FullUsage); false when they cannot be read.
func usageOf(g *cgroup.Group) (api.GroupUsage, bool) {
	s, err := g.FullUsage()
	if err != nil {
		return api.GroupUsage{}, false
	}
	return api.GroupUsage{
		CPUSeconds:       s.CPUUserSeconds + s.CPUSystemSeconds,
		CPULimitCores:    s.Limits.CPUQuotaCores,
		MemoryBytes:      s.MemoryBytes,
		MemoryLimitBytes: s.Limits.MemoryLimitBytes,
		OOMKills:         s.OOMKills,
		Pids:             s.Pids,
		PidsLimit:        s.Limits.PidsLimit,
		IOReadBytes:      s.IOReadBytes,
		IOWriteBytes:     s.IOWriteBytes,
	}, true
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
