package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/limits"
	"github.com/prometheus/client_golang/prometheus"
)

// Agent states in the cluster, as GET /v1/agent and berth_member_up report
// them.
const (
	StateJoining = "joining" // not (yet, or again) a member: no session
	StateMember  = "member"  // a live session: jobs may be claimed and run
	StateFenced  = "fenced"  // the session was lost; every worker was killed
)

// memberSource is the cluster source of an agent: its membership session,
// the leader campaign, the published assignment and the stored workload,
// all over etcd (DESIGN.md, "Membership and assignment"). It fences: when
// the session ends it kills every worker of the agent before the lease can
// expire on the server, then joins again.
type memberSource struct {
	log      *slog.Logger
	client   *cluster.Client
	embedded *cluster.Embedded // nil with external endpoints
	member   assign.Member
	addr     string
	fence    func() error // kills every worker now; set by the agent

	// life outlives the agent's run context: fencing must keep watching the
	// lease while the agent stops its jobs (stop grace can outlast a lease).
	life     context.Context
	endLife  context.CancelFunc
	stopping atomic.Bool // the agent is stopping: fence, but do not rejoin

	changed chan struct{}

	mu        sync.Mutex
	session   *cluster.Session
	state     string
	published cluster.Published
	workload  *limits.Workload
	wlErr     error

	renew    prometheus.Histogram
	fencings prometheus.Counter
}

// startMembership starts (or connects to) etcd, applies the agent file's
// own connectors and groups to the cluster (create or update, never
// delete), joins as a member and starts the leader campaign and the
// watches. It returns once the agent is a member, or an error when the
// store cannot be reached before ctx ends.
func (a *Agent) startMembership(ctx context.Context, cfg *limits.Config, addr string) (*memberSource, error) {
	m := &memberSource{
		log:     a.log,
		member:  memberOf(cfg),
		addr:    addr,
		changed: make(chan struct{}, 1),
		state:   StateJoining,
		renew: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "berth_lease_renew_seconds",
			Help:    "Time one renewal of the agent's session lease took, seconds.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		fencings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_fencing_total",
			Help: "Times the agent lost its session and killed all its workers.",
		}),
		fence: a.fenceAll,
	}
	m.life, m.endLife = context.WithCancel(context.Background())
	endpoints := cfg.Cluster.Endpoints
	if len(endpoints) == 0 {
		dir := cfg.Agent.DataDir
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("embedded etcd: create data_dir %s: %w", dir, err)
		}
		e, err := cluster.StartEmbedded(dir)
		if err != nil {
			return nil, fmt.Errorf("start embedded etcd in %s: %w", dir, err)
		}
		m.embedded = e
		endpoints = e.Endpoints()
		a.log.Info("embedded etcd started", "endpoints", endpoints, "data_dir", dir)
	}
	ccfg := cluster.Config{
		Name:           cfg.Cluster.Name,
		Endpoints:      endpoints,
		SessionTTL:     cfg.Cluster.SessionTTL,
		RebalanceDelay: cfg.Cluster.RebalanceDelay,
		Validate:       Validator(),
		OnRenew:        func(d time.Duration) { m.renew.Observe(d.Seconds()) },
	}
	if cfg.Cluster.TLS.CA != "" || cfg.Cluster.TLS.Cert != "" {
		ccfg.TLS = &cluster.TLSConfig{CA: cfg.Cluster.TLS.CA, Cert: cfg.Cluster.TLS.Cert, Key: cfg.Cluster.TLS.Key}
	}
	c, err := connectRetry(ctx, ccfg, a.log)
	if err != nil {
		m.close()
		return nil, err
	}
	m.client = c
	if err := m.applyFile(ctx, cfg); err != nil {
		// The store keeps what it has (another host may have applied a
		// conflicting definition); the agent runs what the cluster says.
		a.log.Error("the file's connectors were not applied to the cluster", "error", err)
	}
	if err := m.join(ctx); err != nil {
		m.close()
		return nil, err
	}
	go m.watchAssignment(m.life)
	go m.watchWorkload(m.life)
	go m.lead(m.life)
	go m.keepMembership(m.life)
	return m, nil
}

// connectRetry connects to etcd, retrying every second until ctx ends: an
// agent started before its store waits for it.
func connectRetry(ctx context.Context, cfg cluster.Config, log *slog.Logger) (*cluster.Client, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := cluster.Connect(cctx, cfg)
		cancel()
		if err == nil {
			return c, nil
		}
		log.Warn("cannot reach etcd; retrying", "endpoints", cfg.Endpoints, "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to etcd %v: %w", cfg.Endpoints, err)
		case <-time.After(time.Second):
		}
	}
}

// applyFile stores the agent file's own [[connector]] and [[group]]
// blocks: create or update, never delete (many agents may share a cluster,
// each with its own file).
func (m *memberSource) applyFile(ctx context.Context, cfg *limits.Config) error {
	data, err := os.ReadFile(cfg.File)
	if err != nil {
		return fmt.Errorf("read %s: %w", cfg.File, err)
	}
	defs, err := limits.Definitions(cfg.File, data)
	if err != nil {
		return err
	}
	if len(defs.Connectors) == 0 && len(defs.Groups) == 0 {
		return nil
	}
	plan, err := ApplyWorkload(ctx, m.client, defs, false)
	if err != nil {
		return fmt.Errorf("apply the connectors of %s to the cluster: %w", cfg.File, err)
	}
	if len(plan.Created)+len(plan.Updated) > 0 {
		m.log.Info("workload applied", "file", cfg.File, "created", plan.Created, "updated", plan.Updated)
	}
	return nil
}

// join makes the agent a member, retrying while an older session of the
// same agent still holds the member ID (its lease has yet to expire).
func (m *memberSource) join(ctx context.Context) error {
	var lastErr string
	for {
		jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := m.client.Join(jctx, m.declared(), m.addr)
		cancel()
		if err == nil {
			m.mu.Lock()
			m.session, m.state = s, StateMember
			m.mu.Unlock()
			m.log.Info("joined the cluster", "member", m.member.ID, "lease_ttl", s.TTL(), "deadline", s.Deadline())
			m.signal()
			return nil
		}
		// Say why once, not at every retry.
		if msg := err.Error(); msg != lastErr {
			lastErr = msg
			if errors.Is(err, cluster.ErrMemberExists) {
				m.log.Warn("waiting for the previous session of this member ID to expire (an agent restarted before its lease ran out, or another agent uses the same id); retrying every 0.5 s",
					"member", m.member.ID, "session_ttl", m.client.Config().SessionTTL, "error", err)
			} else {
				m.log.Warn("join failed; retrying every 0.5 s", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("join the cluster as %s: %w", m.member.ID, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// declared is the member record the agent registers.
func (m *memberSource) declared() assign.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.member
}

// update replaces the member's declarations (a reload): in the live
// session's record, and for every later join.
func (m *memberSource) update(ctx context.Context, nm assign.Member) error {
	m.mu.Lock()
	m.member = nm
	s := m.session
	m.mu.Unlock()
	if s == nil {
		return nil // the next join writes the new record
	}
	return s.Update(ctx, nm)
}

// keepMembership fences when the session ends and joins again. It runs for
// the source's whole life, through the agent's stop: a lease lost while
// jobs are being stopped with grace still kills them at once.
func (m *memberSource) keepMembership(ctx context.Context) {
	for {
		s := m.currentSession()
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
		}
		// The lease can no longer be proven: kill every worker now, before
		// the server may expire it and another agent may claim the jobs.
		m.mu.Lock()
		m.state, m.session = StateFenced, nil
		m.mu.Unlock()
		for {
			err := m.fence()
			if err == nil {
				break
			}
			// A worker survived the kill: keep the lease (do not revoke it,
			// which would free the claims at once); it expires on its own,
			// and the kill is retried.
			m.log.Error("fence: a job's processes survived the kill; retrying", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		m.fencings.Inc()
		m.log.Error("session lost: every worker killed (fenced)", "member", m.member.ID, "error", s.Err())
		m.signal()
		_ = s.Close()
		if m.stopping.Load() {
			return
		}
		if err := m.join(ctx); err != nil {
			return
		}
	}
}

// sessionCtx bounds a store call made under the session s: it ends when the
// session ends or at its local deadline, whichever comes first, so no call
// can hold up fencing or outlive the lease it relies on.
func sessionCtx(parent context.Context, s *cluster.Session) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(parent, s.Deadline())
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (m *memberSource) currentSession() *cluster.Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.session
}

// lead campaigns for leadership with every session the agent holds; the
// leader computes and publishes assignments (cluster.Client.RunLeader).
func (m *memberSource) lead(ctx context.Context) {
	for ctx.Err() == nil {
		s := m.currentSession()
		if s == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		err := m.client.RunLeader(ctx, s, time.Now)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, cluster.ErrSessionClosed) && !errors.Is(err, cluster.ErrSessionLost) {
			m.log.Warn("leader campaign ended", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (m *memberSource) watchAssignment(ctx context.Context) {
	for p := range m.client.WatchAssignment(ctx) {
		m.mu.Lock()
		m.published = p
		m.mu.Unlock()
		m.signal()
	}
}

func (m *memberSource) watchWorkload(ctx context.Context) {
	for range m.client.WatchWorkload(ctx) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		conns, err1 := m.client.Connectors(rctx)
		groups, err2 := m.client.Groups(rctx)
		cancel()
		if err := errors.Join(err1, err2); err != nil {
			m.log.Warn("read the workload", "error", err)
			continue
		}
		wl, err := ParseWorkload(conns, groups)
		if err != nil {
			m.log.Error("stored workload has invalid definitions; they are not run", "error", err)
		}
		m.mu.Lock()
		m.workload, m.wlErr = wl, err
		m.mu.Unlock()
		m.signal()
	}
}

func (m *memberSource) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Changed implements Source.
func (m *memberSource) Changed() <-chan struct{} { return m.changed }

// Desired implements Source: this member's jobs in the published
// assignment, none while it is not a member.
func (m *memberSource) Desired(context.Context) (Desired, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := Desired{
		Generation: m.published.Generation,
		Unassigned: m.published.Assignment.Unassigned,
		Owners:     owners(m.published.Assignment),
		Workload:   m.workload,
	}
	if m.state == StateMember && m.workload != nil {
		d.Jobs = m.published.Assignment.Members[m.member.ID]
	}
	return d, nil
}

// Claim implements Claimer: create-if-absent under this member's lease.
func (m *memberSource) Claim(ctx context.Context, job string) (bool, string, error) {
	s := m.currentSession()
	if s == nil {
		return false, "", errors.New("not a member of the cluster")
	}
	sctx, cancel := sessionCtx(ctx, s)
	defer cancel()
	return s.Claim(sctx, job)
}

// Release implements Claimer.
func (m *memberSource) Release(ctx context.Context, job string) error {
	s := m.currentSession()
	if s == nil {
		return nil // the lease is gone, and the claim with it
	}
	sctx, cancel := sessionCtx(ctx, s)
	defer cancel()
	return s.Release(sctx, job)
}

// Info implements Membership.
func (m *memberSource) Info() AgentInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return AgentInfo{ID: m.member.ID, State: m.state, Leader: m.published.Leader == m.member.ID, Generation: m.published.Generation}
}

// Members implements Membership.
func (m *memberSource) Members(ctx context.Context) ([]cluster.MemberRecord, error) {
	return m.client.Members(ctx)
}

// Published implements Membership.
func (m *memberSource) Published() cluster.Published {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.published
}

// Describe implements prometheus.Collector.
func (m *memberSource) Describe(ch chan<- *prometheus.Desc) {
	m.renew.Describe(ch)
	m.fencings.Describe(ch)
	ch <- descMemberUp
	ch <- descConflicts
}

// Collect implements prometheus.Collector.
func (m *memberSource) Collect(ch chan<- prometheus.Metric) {
	m.renew.Collect(ch)
	m.fencings.Collect(ch)
	info := m.Info()
	up := 0.0
	if info.State == StateMember {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descMemberUp, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(descConflicts, prometheus.GaugeValue, float64(len(m.Published().Assignment.Conflicts)))
}

var (
	descMemberUp  = prometheus.NewDesc("berth_member_up", "1 while the agent holds a live session (is a cluster member), else 0.", nil, nil)
	descConflicts = prometheus.NewDesc("berth_static_conflicts", "Jobs declared by more than one member in the published assignment (KIP-987 static; lowest member ID wins).", nil, nil)
)

// close leaves the cluster: ends the session (its claims go with its
// lease), closes the client and stops the embedded etcd.
func (m *memberSource) close() {
	m.stopping.Store(true)
	if m.endLife != nil {
		m.endLife()
	}
	if s := m.currentSession(); s != nil {
		_ = s.Close()
	}
	if m.client != nil {
		_ = m.client.Close()
	}
	if m.embedded != nil {
		m.embedded.Close()
	}
}

func owners(a assign.Assignment) map[string]string {
	out := map[string]string{}
	for member, jobs := range a.Members {
		for _, j := range jobs {
			out[j] = member
		}
	}
	return out
}
