package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/internal/retry"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/workload"
	"github.com/jonboulle/clockwork"
)

// Cluster is the source of an agent that is a member of a berth cluster:
// its session, the leader campaign, its own share of the published
// assignment and the definitions of its own jobs, all over etcd
// (docs/design.md, "Membership, claims and fencing" and "Per-member
// publication"). Per generation the agent reads data proportional to its
// own jobs: it watches only its share and the small publication head, and
// reads by key the definitions whose revisions its share says changed.
// Cluster-wide views (Assignment, Members, Workload) are read on demand,
// page by page. With no [cluster] endpoints it runs an embedded single-node
// etcd under data_dir.
type Cluster struct {
	cfg   *config.Config
	host  *host.Host
	clock clockwork.Clock
	opts  Options
	log   *slog.Logger
	addr  string // the agent's API address in its member record

	client *cluster.Client

	// life outlives the agent's run context: fencing must keep watching
	// the lease while the agent stops its jobs (stop grace can outlast a
	// lease). Close ends it and waits for every goroutine in wg.
	life    context.Context
	endLife context.CancelFunc
	wg      sync.WaitGroup

	changed chan struct{}
	lost    chan Loss

	mu       sync.Mutex
	fencings uint64
	member   assign.Member
	session  *cluster.Session
	state    State
	// saved is the session an earlier run saved (Options.Resume), until
	// it is resumed or found not resumable; zero then.
	saved    SavedSession
	stopping bool
	// share is this member's share as last delivered (or read); head the
	// newest publication head seen. confirmed is the newest generation
	// the share is known to be current for: the share's own generation,
	// or a head's generation once the share was read after that head was
	// stored (a share keeps its generation while others change).
	share     cluster.Share
	head      cluster.Head
	confirmed int64
	workload  *spec.Workload // the definitions of the share's jobs; nil: not read yet
	actions   cluster.Actions
	// actionsRead is set once the target states have been read: until
	// then no job is given to the agent, which could otherwise start a
	// paused connector's job at start-up.
	actionsRead bool
}

// Options configure a Cluster source.
type Options struct {
	// Log receives the source's structured log; nil: slog.Default().
	Log *slog.Logger
	// OnRenew, when set, is told the round-trip time of every successful
	// lease renewal. It must not block.
	OnRenew func(time.Duration)
	// OnDeadline, when set, is told the session's local fencing deadline
	// (cluster.Session.Deadline: last renewal sent + TTL − max(1 s,
	// TTL/5)) when a session is made or resumed, before any job is claimed
	// under it, and after every successful renewal: the lease guard kills
	// every job when it passes (package guard). It must not block.
	OnDeadline func(time.Time)
	// OnExpiry, when set, is told the session's member ID, lease and
	// earliest lease expiry on the store (cluster.Session.LastRenewal +
	// TTL: no other member can claim the agent's jobs before it) each time
	// OnDeadline is told the deadline: the claim file (package fencing)
	// says it to the jobs. It must not block.
	OnExpiry func(member string, lease int64, expiry time.Time)
	// Resume is the session an earlier run of this agent saved (package
	// handover reads it at start): Join takes it over if its lease still
	// lives and its member is this agent's (cluster.Client.Resume), the
	// same lease, member record and claims; else Join joins anew. Zero:
	// join anew.
	Resume SavedSession
	// Record saves the session for the agent's next run each time one is
	// made or resumed, and removes it when it ends for good (the agent
	// leaves, or the lease is lost); nil: nothing is saved.
	Record SessionRecord
}

// SavedSession is a session as an agent saves it for its next run: its
// member ID and lease ID.
type SavedSession struct {
	Member string
	Lease  int64
}

// SessionRecord keeps the session for the agent's next run
// (handover.SessionFile).
type SessionRecord interface {
	// Save records s. Errors: it cannot be written (the next run then
	// joins anew).
	Save(s SavedSession) error
	// Remove forgets the saved session.
	Remove()
}

// NewCluster returns the cluster source of the agent file cfg, whose
// definitions are checked against host. It does no I/O: Connect reaches
// the store, Join makes the agent a member.
func NewCluster(cfg *config.Config, host *host.Host, opts Options) *Cluster {
	c := &Cluster{cfg: cfg, host: host, clock: clockwork.NewRealClock(), opts: opts, log: opts.Log,
		changed: make(chan struct{}, 1), lost: make(chan Loss), member: memberOf(cfg), state: Joining, saved: opts.Resume}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.life, c.endLife = context.WithCancel(context.Background())
	return c
}

// Connect connects to the etcd at endpoints ([cluster] endpoints, or the
// embedded etcd's), retrying with backoff while the store is away. It
// returns an error when ctx ends first, or at once when the
// password_file cannot be used.
func (c *Cluster) Connect(ctx context.Context, endpoints []string) error {
	// A password_file that cannot be used is a configuration error: say
	// so at once rather than retry.
	if _, err := StoreConfig(c.cfg.Cluster, endpoints); err != nil {
		return err
	}
	var lastErr string
	err := retry.Do(ctx, c.clock, retry.Store(), func() error {
		// Read at every try: a password_file fixed meanwhile is used.
		ccfg, err := StoreConfig(c.cfg.Cluster, endpoints)
		if err != nil {
			return err
		}
		ccfg.Validate, ccfg.OnRenew = workload.Validator(c.host), c.onRenew
		// The embedded etcd listens on loopback: no other member joins.
		ccfg.SoleMember = len(c.cfg.Cluster.Endpoints) == 0
		// Every generation this agent publishes as leader is one log line:
		// why jobs move is then in the leader's log.
		ccfg.OnPublish = func(p cluster.PublishStats) {
			c.log.Info("published an assignment as leader", "generation", p.Generation,
				"shares_written", p.Shares, "transactions", p.Transactions, "compute", p.Compute, "write", p.Write)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		cl, err := cluster.Connect(cctx, ccfg)
		if err == nil {
			c.client = cl
		}
		return err
	}, func(err error, wait time.Duration) {
		if msg := err.Error(); msg != lastErr {
			lastErr = msg
			c.log.Warn("cannot reach etcd; retrying with backoff", "endpoints", endpoints, "error", err, "next_try_in", wait.Round(time.Millisecond))
		}
	})
	if err != nil {
		return fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	return nil
}

// onRenew is told the round-trip time of every successful renewal of the
// session's lease (cluster.Config.OnRenew), after the session has recorded
// it: it passes the time on (Options.OnRenew) and the new deadline and
// expiry (Options.OnDeadline, Options.OnExpiry).
func (c *Cluster) onRenew(rtt time.Duration) {
	if c.opts.OnRenew != nil {
		c.opts.OnRenew(rtt)
	}
	c.mu.Lock()
	s := c.session
	c.mu.Unlock()
	if s != nil {
		c.tellDeadline(s)
	}
}

// Client is the store client Connect made (nil before): the agent's
// wiring writes the file's workload, target states and restart requests
// and reads cluster-wide views through it directly.
func (c *Cluster) Client() *cluster.Client { return c.client }

// Join makes the agent a member whose API others reach at addr (host:port,
// or https://host:port when it serves TLS), retrying while the store is
// away or an earlier session of the same member ID still holds its
// record, and starts the leader campaign and the watches. It returns an
// error when ctx ends first.
func (c *Cluster) Join(ctx context.Context, addr string) error {
	c.addr = addr
	if err := c.join(ctx); err != nil {
		return err
	}
	for _, f := range []func(context.Context){c.watchShare, c.watchHead, c.watchActions, c.lead, c.keepMembership} {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			f(c.life)
		}()
	}
	return nil
}

// join makes the agent a member. While an older session of the same
// agent still holds the member ID it watches the record and joins as soon
// as the store deletes it (when the store expires that lease: at most
// session_ttl after its last renewal, but up to session_ttl plus the
// store's election timeout after a store that restarted or changed leader
// elected its leader, since etcd then grants every lease its whole TTL
// again); it retries with backoff while the store is away.
func (c *Cluster) join(ctx context.Context) error {
	var lastErr string
	err := retry.Do(ctx, c.clock, retry.Store(), func() error {
		jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if ok, err := c.resume(jctx); ok || err != nil {
			return err
		}
		s, err := c.client.Join(jctx, c.declared(), c.addr)
		if errors.Is(err, cluster.ErrMemberExists) {
			// An earlier session of this ID holds the record: join the
			// moment the store deletes it rather than at the next backoff
			// step (which could come up to 10 s later).
			c.log.Warn("waiting for the previous session of this member ID to expire (an agent restarted before its lease ran out, or another agent uses the same id)",
				"member", c.declared().ID, "session_ttl", c.client.Config().SessionTTL, "error", err)
			lastErr = err.Error()
			if werr := c.client.WaitMemberGone(ctx, c.declared().ID); werr != nil {
				return werr
			}
			cancel()
			jctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			s, err = c.client.Join(jctx, c.declared(), c.addr)
		}
		if err != nil {
			return err
		}
		c.becomeMember(s)
		c.log.Info("joined the cluster", "member", s.Member().ID, "lease", fmt.Sprintf("%x", int64(s.Lease())), "lease_ttl", s.TTL(), "deadline", s.Deadline())
		return nil
	}, func(err error, wait time.Duration) {
		// Say why once, not at every retry.
		if msg := err.Error(); msg != lastErr {
			lastErr = msg
			if errors.Is(err, cluster.ErrMemberExists) {
				c.log.Warn("waiting for the previous session of this member ID to expire (an agent restarted before its lease ran out, or another agent uses the same id); retrying with backoff",
					"member", c.declared().ID, "session_ttl", c.client.Config().SessionTTL, "error", err)
			} else {
				c.log.Warn("join failed; retrying with backoff", "error", err, "next_try_in", wait.Round(time.Millisecond))
			}
		}
	})
	if err != nil {
		return fmt.Errorf("join the cluster as %s: %w", c.declared().ID, err)
	}
	return nil
}

// resume takes over the session an earlier run of this agent saved
// (Options.Resume), if its lease still lives: ok reports that the agent
// is a member again. A session that cannot be resumed is forgotten (the
// caller joins anew); err is a store error, to retry.
func (c *Cluster) resume(ctx context.Context) (ok bool, err error) {
	id := c.declared().ID
	c.mu.Lock()
	saved := c.saved
	c.mu.Unlock()
	if saved.Lease == 0 || saved.Member != id {
		return false, nil
	}
	lease := saved.Lease
	s, err := c.client.Resume(ctx, c.declared(), c.addr, lease)
	switch {
	case errors.Is(err, cluster.ErrNotResumable):
		c.log.Info("the previous run's session cannot be resumed; joining anew", "member", id, "lease", fmt.Sprintf("%x", lease), "reason", err)
		c.forgetSaved()
		return false, nil
	case err != nil:
		return false, err
	}
	c.becomeMember(s)
	// The same line as a join (tools wait for it), saying it resumed: the
	// previous run's lease, member record and claims.
	c.log.Info("joined the cluster", "resumed", true, "member", id,
		"lease", fmt.Sprintf("%x", lease), "lease_ttl", s.TTL(), "deadline", s.Deadline())
	return true, nil
}

// becomeMember makes s the agent's session, saved for the agent's next run.
func (c *Cluster) becomeMember(s *cluster.Session) {
	if c.opts.Record != nil {
		if err := c.opts.Record.Save(SavedSession{Member: s.Member().ID, Lease: int64(s.Lease())}); err != nil {
			// The next run then waits for the lease to expire, as before.
			c.log.Warn("the session is not saved for the next run", "error", err)
		}
	}
	c.mu.Lock()
	c.session, c.state, c.saved = s, Member, SavedSession{}
	c.mu.Unlock()
	// The guard and the claim file hold the deadline before any job is
	// claimed under s.
	c.tellDeadline(s)
	signal(c.changed)
}

// tellDeadline tells OnDeadline and OnExpiry session s's deadline and
// expiry.
func (c *Cluster) tellDeadline(s *cluster.Session) {
	if c.opts.OnDeadline != nil {
		c.opts.OnDeadline(s.Deadline())
	}
	if c.opts.OnExpiry != nil {
		c.opts.OnExpiry(s.Member().ID, int64(s.Lease()), s.LastRenewal().Add(s.TTL()))
	}
}

// forgetSaved forgets the saved session: resumed no more, by this run
// or the next.
func (c *Cluster) forgetSaved() {
	c.mu.Lock()
	c.saved = SavedSession{}
	c.mu.Unlock()
	if c.opts.Record != nil {
		c.opts.Record.Remove()
	}
}

// declared is the member record the agent registers.
func (c *Cluster) declared() assign.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.member
}

// UpdateMember makes the [static] table and protocol of a re-read agent
// file cfg the member record; the change reaches every agent, this one
// included, through the store. A record that cannot be written now is
// logged and written at the next join.
func (c *Cluster) UpdateMember(ctx context.Context, cfg *config.Config) {
	nm := memberOf(cfg)
	c.mu.Lock()
	old, s := c.member, c.session
	c.member, c.cfg = nm, cfg
	c.mu.Unlock()
	if !changedMember(old, nm) || s == nil {
		return // the next join writes the new record
	}
	if err := s.Update(ctx, nm); err != nil {
		c.log.Error("update the member record with the reloaded [static] table", "error", err)
		return
	}
	c.log.Info("member record updated", "connectors", nm.Connectors, "tasks", nm.Tasks, "protocol", nm.Protocol)
}

// changedMember reports whether the member record differs: declarations or
// protocol.
func changedMember(a, b assign.Member) bool {
	return a.Protocol != b.Protocol || !slices.Equal(a.Connectors, b.Connectors) || !slices.Equal(a.Tasks, b.Tasks)
}

// keepMembership hands each loss of the session to the agent (Lost), waits
// until the agent has fenced (Loss.Fenced), and joins again. It runs for
// the source's whole life, through the agent's stop: a lease lost while
// jobs are being stopped with grace still kills them at once.
func (c *Cluster) keepMembership(ctx context.Context) {
	for {
		s := c.currentSession()
		select {
		case <-ctx.Done():
			return
		case <-s.Done():
		}
		c.mu.Lock()
		c.state, c.session = Fenced, nil
		c.mu.Unlock()
		c.forgetSaved() // the lease is gone: nothing to resume
		// The last renewal tells when the store may expire the lease (at
		// the earliest last_renewal + lease_ttl): every worker dies before.
		// The cause is logged first, then what fencing did to each job.
		c.log.Error("session lost: fencing (every worker is killed now)", "member", c.declared().ID,
			"last_renewal", s.LastRenewal().UTC().Format(time.RFC3339Nano), "lease_ttl", s.TTL(), "error", s.Err())
		loss := NewLoss(c.declared().ID, s.LastRenewal(), s.TTL(), s.Err())
		select {
		case c.lost <- loss:
		case <-ctx.Done():
			return
		}
		// A worker that survived the kill keeps the lease (no revoke, which
		// would free its claims at once): the agent calls Fenced only once
		// every worker is gone.
		select {
		case <-loss.Done():
		case <-ctx.Done():
			return
		}
		c.mu.Lock()
		c.fencings++
		stopping := c.stopping
		c.mu.Unlock()
		c.log.Warn("fenced: every worker killed; joining again when the store answers", "member", c.declared().ID)
		signal(c.changed)
		_ = s.Close()
		if stopping {
			return
		}
		if err := c.join(ctx); err != nil {
			return
		}
	}
}

// Lost implements Source.
func (c *Cluster) Lost() <-chan Loss { return c.lost }

// RenewNow renews the session's lease at once and returns the new local
// fencing deadline (cluster.Session.RenewNow); an error when the agent
// holds no session or the renewal fails.
func (c *Cluster) RenewNow(ctx context.Context) (time.Time, error) {
	s := c.currentSession()
	if s == nil {
		return time.Time{}, errors.New("no session to renew")
	}
	return s.RenewNow(ctx)
}

// sessionCtx bounds a store call made under the session s: it ends when the
// session ends or at its local deadline, whichever comes first, so no call
// can hold up fencing or outlive the lease it relies on.
func sessionCtx(parent context.Context, s *cluster.Session) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(parent, s.Deadline())
	stop := context.AfterFunc(s.Context(), cancel)
	return ctx, func() { stop(); cancel() }
}

func (c *Cluster) currentSession() *cluster.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// lead campaigns for leadership with every session the agent holds; the
// leader computes and publishes assignments (cluster.Client.RunLeader).
func (c *Cluster) lead(ctx context.Context) {
	b := retry.Store().New()
	for ctx.Err() == nil {
		s := c.currentSession()
		if s == nil {
			if !retry.Sleep(ctx, c.clock, b.NextBackOff()) {
				return
			}
			continue
		}
		b.Reset()
		err := c.client.RunLeader(ctx, s, c.clock.Now)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, cluster.ErrSessionClosed) && !errors.Is(err, cluster.ErrSessionLost) {
			c.log.Warn("leader campaign ended", "error", err)
		}
		if !retry.Sleep(ctx, c.clock, b.NextBackOff()) {
			return
		}
	}
}

// watchShare follows this member's share (cluster.Client.WatchShare) and
// reads the definitions of its jobs when they changed.
func (c *Cluster) watchShare(ctx context.Context) {
	defs := newDefinitions()
	for sh := range c.client.WatchShare(ctx, c.declared().ID) {
		c.takeShare(ctx, sh, defs)
	}
}

// takeShare puts share sh in force once the definitions of its jobs have
// been read (retried while the store fails: a share without them cannot
// be run), unless a newer share is already in force.
func (c *Cluster) takeShare(ctx context.Context, sh cluster.Share, defs *definitions) {
	err := retry.Do(ctx, c.clock, retry.Store(), func() error {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return defs.update(rctx, c.client, sh)
	}, func(err error, _ time.Duration) {
		c.log.Warn("read the definitions of this agent's jobs; retrying", "generation", sh.Generation, "error", err)
	})
	if err != nil {
		return // ctx ended
	}
	wl, err := workload.Parse(defs.conns, defs.groups, c.host)
	if err != nil {
		c.log.Error("stored workload has invalid definitions; they are not run", "error", err)
	}
	c.mu.Lock()
	if sh.Generation >= c.share.Generation {
		c.share, c.workload = sh, wl
		c.confirmed = max(c.confirmed, sh.Generation)
	}
	c.mu.Unlock()
	signal(c.changed)
}

// watchHead follows the publication head: the generation, leader and
// counts the agent reports. A head newer than the share in force is
// confirmed by reading the share once (only this member's keys): the head
// is stored after every share of its generation, so a share read after it
// is current for that generation.
func (c *Cluster) watchHead(ctx context.Context) {
	for h := range c.client.WatchHead(ctx) {
		c.mu.Lock()
		c.head = h
		need := h.Generation > c.confirmed
		c.mu.Unlock()
		if need {
			var sh cluster.Share
			var ok bool
			err := retry.Do(ctx, c.clock, retry.Store(), func() error {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				var err error
				sh, ok, err = c.client.Share(rctx, c.declared().ID)
				return err
			}, func(err error, _ time.Duration) {
				c.log.Warn("read this agent's share; retrying", "error", err)
			})
			if err != nil {
				return // ctx ended
			}
			c.mu.Lock()
			switch {
			case !ok && c.share.Generation == 0:
				// No share names this member yet: it has none in
				// this generation (a publication under way delivers
				// one through watchShare).
				c.confirmed = max(c.confirmed, h.Generation)
			case ok && sh.Generation <= c.share.Generation:
				c.confirmed = max(c.confirmed, h.Generation)
			}
			// Otherwise a newer share than the one in force is stored:
			// watchShare delivers it with its definitions.
			c.mu.Unlock()
		}
		signal(c.changed)
	}
}

// watchActions follows the operators' target states and restart requests.
func (c *Cluster) watchActions(ctx context.Context) {
	for range c.client.WatchActions(ctx) {
		// A failed read is retried: the watch signals only on a change.
		var a cluster.Actions
		err := retry.Do(ctx, c.clock, retry.Store(), func() error {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			var err error
			a, err = c.client.Actions(rctx)
			return err
		}, func(err error, _ time.Duration) {
			c.log.Warn("read target states and restart requests; retrying", "error", err)
		})
		if err != nil {
			return // ctx ended
		}
		c.mu.Lock()
		c.actions, c.actionsRead = a, true
		c.mu.Unlock()
		signal(c.changed)
	}
}

// RestartDone implements Source.
func (c *Cluster) RestartDone(ctx context.Context, r cluster.RestartRequest) error {
	return c.client.RestartDone(ctx, r)
}

// Changed implements Source.
func (c *Cluster) Changed() <-chan struct{} { return c.changed }

// Desired implements Source: this member's jobs in the published
// assignment; none while it is not a member; and generation 0 (no
// assignment yet, so the agent does not report ready) before the workload
// and the operators' target states have been read, lest a pass start a
// paused connector's job.
func (c *Cluster) Desired() Desired {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := Desired{
		Generation: c.confirmed,
		Unassigned: c.head.Unassigned,
		Workload:   c.workload,
		Targets:    c.actions.Targets,
		Restarts:   c.actions.Restarts,
	}
	switch {
	case c.workload == nil || !c.actionsRead:
		// Not everything a pass needs is known yet: no assignment to act
		// on (the agent is not ready until one is).
		d.Generation = 0
	case c.state == Member && !c.share.Departed:
		d.Jobs = c.share.Jobs
	}
	return d
}

// ClaimMany implements Source: the claims of jobs in batches (each
// create-if-absent under this member's lease, or re-put for a job renew
// names, cluster.Session.ClaimRuns), bounded by the session.
func (c *Cluster) ClaimMany(ctx context.Context, jobs []string, renew func(string) bool) ([]cluster.Claimed, map[string]string, error) {
	s := c.currentSession()
	if s == nil {
		return nil, nil, errors.New("not a member of the cluster")
	}
	sctx, cancel := sessionCtx(ctx, s)
	defer cancel()
	return s.ClaimRuns(sctx, jobs, renew)
}

// RenewClaim implements Source (cluster.Session.RenewClaim), bounded by
// the session.
func (c *Cluster) RenewClaim(ctx context.Context, job string) (cluster.Claimed, error) {
	s := c.currentSession()
	if s == nil {
		return cluster.Claimed{}, fmt.Errorf("renew claim %s: not a member of the cluster: %w", job, cluster.ErrClaimLost)
	}
	sctx, cancel := sessionCtx(ctx, s)
	defer cancel()
	return s.RenewClaim(sctx, job)
}

// Release implements Source.
func (c *Cluster) Release(ctx context.Context, job string) error {
	s := c.currentSession()
	if s == nil {
		return nil // the lease is gone, and the claim with it
	}
	sctx, cancel := sessionCtx(ctx, s)
	defer cancel()
	return s.Release(sctx, job)
}

// Info describes the agent as a member, for the API and the metrics.
func (c *Cluster) Info() Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Only a member can lead: a fenced or joining agent's last head may
	// still name it, from before its session was lost.
	i := Info{ID: c.member.ID, State: c.state, Leader: c.state == Member && c.head.Leader == c.member.ID,
		Generation: c.confirmed, Conflicts: c.head.Conflicts, Fencings: c.fencings}
	if s := c.session; s != nil {
		i.LastRenewal, i.Deadline = s.LastRenewal(), s.Deadline()
	}
	return i
}

// Stopping tells the source the agent is stopping: a session lost from now
// on is handed over for fencing, but not joined again.
func (c *Cluster) Stopping() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
}

// Close ends the source's goroutines and waits for them, ends the session
// (its claims go with its lease) and closes the client.
func (c *Cluster) Close() {
	c.Stopping()
	c.endLife()
	c.wg.Wait()
	if s := c.currentSession(); s != nil {
		_ = s.Close()
		c.forgetSaved() // left: the lease is revoked
	}
	if c.client != nil {
		_ = c.client.Close()
	}
}
