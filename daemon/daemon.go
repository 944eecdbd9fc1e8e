package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/cluster/embedetcd"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/fencing"
	"github.com/berthd/berth/guard"
	"github.com/berthd/berth/handover"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/metrics"
	"github.com/berthd/berth/recommend/sampler"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/supervisor"
	"github.com/berthd/berth/worker"
	"github.com/jonboulle/clockwork"
)

// Agent is one berth agent as a process runs it: its supervisor and
// everything around it. Create it with New and run it with Run; every
// other method may be called from any goroutine.
type Agent struct {
	log   *slog.Logger
	path  string // configuration file, re-read by Reload
	host  *host.Host
	clock clockwork.Clock
	build [2]string // version, commit
	// guardCmd starts the lease guard (Options.GuardCommand); guard is
	// its client, nil without one.
	guardCmd []string
	guard    *guard.Client
	// handedOver: a hand-over started this image (Options.HandedOver).
	handedOver bool
	// notes records the jobs waiting to restart for the next agent
	// (handover.BackoffFile); nil without a guard.
	notes *handover.Notes
	// tokens is the record of the fencing tokens handed out (package
	// fencing); claim the claim file the jobs read, set at each renewal.
	tokens *fencing.Record
	claim  *fencing.ClaimFile

	// Set by Run before the supervisor starts, then read only.
	hier     *cgroup.Hierarchy
	src      *source.Cluster
	sup      *supervisor.Agent
	registry *metrics.Registry
	embedded *embedetcd.Server // nil with [cluster] endpoints
	started  chan struct{}     // closed once sup is set
	ready    chan struct{}     // closed once sup is ready
	// imageStarted is when this process image started (GET /v1/agent).
	imageStarted time.Time
	conf         *confState // the configuration in force, its reloads
	backend      *backend   // the agent as its API and metrics see it
	// usage is the usage history's sampler (recommend.go); set by Run
	// before the API is served.
	usage *sampler.Sampler
	// usageRead is closed once the usage history is read (Run reads it
	// beside the join: at thousands of jobs that is a second); what uses
	// the history waits for it.
	usageRead chan struct{}

	mu         sync.Mutex // guards what follows
	handler    http.Handler
	declWarned bool
	adoption   *api.Adoption        // what the start adopted; nil: nothing held, no hand-over
	refused    *api.HandOverRefusal // the last hand-over refused; nil: none
	place      jobsPlace            // where the jobs live (systemd's scope)
	reloadMu   sync.Mutex           // one reload at a time
}

// Options configure an Agent beyond its configuration file.
type Options struct {
	// Logger receives the agent's structured log; nil: slog.Default().
	Logger *slog.Logger
	// Host holds the facts definitions are checked against; nil:
	// host.Local().
	Host *host.Host
	// Version and Commit are the agent's build, as GET / reports them.
	Version, Commit string
	// GuardCommand runs the lease guard, `berth guard` ({the berth binary,
	// "guard"}; package guard); nil: no guard is started (a test's agent).
	GuardCommand []string
	// HandedOver says that a hand-over (berth upgrade, SIGUSR2) started
	// this image: it reports its adoption (GET /v1/agent) after its first
	// reconcile even when the lease guard held no run, so that berth
	// upgrade sees the hand-over end rather than wait its --timeout.
	HandedOver bool
}

// New returns an agent for cfg, whose file is path (re-read on Reload). It
// does not touch cgroups, processes or the store.
func New(cfg *config.Config, path string, opts Options) *Agent {
	a := &Agent{log: opts.Logger, path: path, host: opts.Host, clock: clockwork.NewRealClock(),
		build: [2]string{opts.Version, opts.Commit}, guardCmd: opts.GuardCommand, handedOver: opts.HandedOver, started: make(chan struct{}), ready: make(chan struct{}), usageRead: make(chan struct{}),
		imageStarted: time.Now().UTC()}
	a.backend = &backend{a}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.host == nil {
		a.host = host.Local()
	}
	a.conf = newConfState(cfg, a.clock.Now())
	return a
}

// Config returns the configuration in force.
func (a *Agent) Config() *config.Config { return a.conf.config() }

// Run locks the agent's data_dir and cgroup root, listens, opens the cgroup
// hierarchy and kills whatever an earlier run left in <cgroup_root>/jobs
// and <cgroup_root>/groups, serves HTTP, joins the cluster (starting an
// embedded etcd when [cluster] names no endpoints) and runs the supervisor
// until ctx is cancelled. It then stops every worker, leaves the cluster,
// removes every cgroup it made and returns nil. It returns an error when
// another agent holds its data_dir or cgroup root, the hierarchy cannot be
// opened, leftovers cannot be removed, or the listen address cannot be
// bound; in each case nothing is left running.
func (a *Agent) Run(ctx context.Context) (err error) {
	cfg := a.Config()
	// Nothing is touched before this agent knows it is the only one on this
	// data_dir and cgroup root, and holds its listen address.
	release, err := lockAgent(cfg.Agent.DataDir, cfg.Agent.CgroupRoot)
	if err != nil {
		return err
	}
	defer release()
	ln, err := net.Listen("tcp", cfg.Agent.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (agent.listen): %w", cfg.Agent.Listen, err)
	}
	defer ln.Close()
	// TLS and authentication of the listener: a web configuration that
	// does not load is refused before anything is touched.
	webTLS, err := api.CheckWebConfig(cfg.Agent.WebConfigFile)
	if err != nil {
		return fmt.Errorf("agent.web_config_file: %w", err)
	}

	// Every run's fencing token must exceed the tokens handed out before
	// (docs/fencing.md): a record that cannot be read is refused before
	// anything runs.
	if a.tokens, err = fencing.OpenRecord(fencing.RecordPath(cfg.Agent.DataDir)); err != nil {
		return err
	}

	// The agent reaps every process of every job (a child subreaper):
	// refuse to start if it cannot be one.
	rt, err := worker.StartRuntime()
	if err != nil {
		return fmt.Errorf("start the worker runtime: %w", err)
	}
	defer func() {
		if cerr := rt.Close(); cerr != nil {
			a.log.Error("stop the worker runtime", "error", cerr)
		}
	}()
	// Under systemd the jobs may live in a scope of their own (placeJobs).
	root := cfg.Agent.CgroupRoot
	var place jobsPlace
	if root == "" {
		if place, err = a.placeJobs(ctx); err != nil {
			return err
		}
		root = place.root
		a.mu.Lock()
		a.place = place
		a.mu.Unlock()
	}
	var hier *cgroup.Hierarchy
	if place.scope != "" {
		hier, err = cgroup.OpenDelegated(root)
	} else {
		hier, err = cgroup.Open(root)
	}
	if err != nil {
		return fmt.Errorf("open cgroup root %q: %w", root, err)
	}
	a.hier = hier
	hier.SetLogger(a.log)
	a.log.Info("cgroup hierarchy", "mode", hier.Mode().String(), "root", hier.Root())
	warnJournal(a.log, cfg.Agent.LogSink)
	// One agent per cgroup_root, also after a crash: a guard of another
	// data_dir still in the root would kill this agent's jobs at its
	// deadline (docs/live-restart.md).
	if err := guard.CheckRoot(hier, cfg.Agent.DataDir); err != nil {
		return fmt.Errorf("refusing to start, nothing was touched: %w", err)
	}
	// And per data_dir: the guard of this data_dir may hold runs in
	// another cgroup root (an agent killed, its cgroup_root changed).
	if len(a.guardCmd) > 0 {
		if err := guard.Check(ctx, guard.Options{DataDir: cfg.Agent.DataDir, CgroupRoot: root}); err != nil {
			return fmt.Errorf("refusing to start, nothing was touched: %w", err)
		}
	}
	if err := hier.Prepare(); err != nil {
		return fmt.Errorf("prepare cgroup root %q: %w", hier.Root(), err)
	}
	// From the session's first deadline on, the lease guard kills every
	// job when a deadline passes without a renewal: this agent was killed
	// or hangs. It is the parent of every job, so that a job outlives an
	// agent that crashes or is upgraded, and the next agent adopts the
	// runs it holds (docs/live-restart.md). A guard that still runs is
	// connected to; else one is started.
	if len(a.guardCmd) > 0 {
		g, err := guard.Start(ctx, guard.Options{DataDir: cfg.Agent.DataDir, CgroupRoot: root,
			Command: a.guardCmd, Log: a.log})
		if err != nil {
			return fmt.Errorf("start the lease guard: %w", err)
		}
		// The guard holds the jobs' scope now: the agent leaves it.
		if err := a.leaveScope(place); err != nil {
			g.Close()
			return err
		}
		a.guard = g
		defer g.Close()
	}
	// What the earlier agent left (the guard's runs, checked; the jobs
	// waiting to restart; the session), read once: the first reconcile
	// adopts, resumes or discards each run and wait, the source resumes
	// the session.
	// The claim file says the session's expiry on the jobs' clock, the
	// clock of the process that forks them.
	a.claim = fencing.StartClaimFile(fencing.ClaimFilePath(cfg.Agent.DataDir), a.forker, a.log)
	defer a.claim.Close()
	// The embedded etcd starts beside the reading of what the earlier
	// agent left (the guard's list of its runs, a third of a second at
	// 5,000 runs): neither needs the other.
	store := a.startEmbedded(cfg)
	defer store.discard()
	hopts := handover.Options{DataDir: cfg.Agent.DataDir, Log: a.log}
	if a.guard != nil {
		hopts.Guard = a.guard
	}
	inherited := handover.Load(ctx, hopts)
	a.notes = inherited.Notes
	// A job that nobody claims must not run: kill what an earlier run of the
	// agent left behind before anything else (failure case C1), but the
	// runs to adopt.
	for _, sub := range cgroup.Subtrees() {
		if err := hier.CleanupExcept(ctx, sub, inherited.Keep); err != nil {
			a.notes.Close(false) // the waits stay for the next try
			return fmt.Errorf("remove leftovers under %s/%s: %w", hier.Root(), sub, err)
		}
	}
	// From here on, leave no cgroup of ours behind: the root too, unless it
	// is the cgroup systemd delegated to the agent (which systemd owns).
	// The guard is released first (its leaf is under the root), and only
	// when every job's processes are gone: else it keeps the deadline.
	defer func() {
		if err == nil {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = a.guard.Release(rctx)
			cancel()
		}
		if err == nil {
			a.claim.Remove() // no job of this agent is left
		}
		a.notes.Close(err == nil) // a clean stop leaves no wait for a next agent
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if rerr := hier.Remove(rctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()

	a.registry, err = metrics.NewRegistry(a.log, a.backend)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	// The usage history (berth recommend), read beside the join; the
	// sampler starts once it is read.
	a.usage = openUsage(cfg.Agent.DataDir, a.backend, a.log)
	go func() {
		defer close(a.usageRead)
		a.usage.Load()
	}()
	defer func() { <-a.usageRead }()
	// Serve from here on: /healthz answers 503 and /v1/agent "joining"
	// until the agent is a member and has reconciled.
	h := api.Handler(a.backend, api.Options{Metrics: a.registry.Handler(), Listen: ln.Addr().String(), WebConfigFile: cfg.Agent.WebConfigFile,
		Version: a.build[0], Commit: a.build[1], Cluster: cfg.Cluster.Name,
		AllowedHosts: append([]string{cfg.Agent.Listen, cfg.Agent.Advertise}, cfg.Agent.AllowedHosts...), Log: a.log,
		Recommender: a.backend})
	a.mu.Lock()
	a.handler = h
	a.mu.Unlock()
	srv := api.NewServer(ln, h, api.ServerOptions{WebConfigFile: cfg.Agent.WebConfigFile, Log: a.log})
	serveErr := make(chan error, 1)
	served := make(chan struct{})
	go func() {
		defer close(served)
		serveErr <- srv.Serve()
	}()
	// Other members reach this agent at the address of its member record:
	// with its scheme when it serves TLS.
	addr, aerr := advertiseAddr(cfg.Agent.Advertise, ln.Addr(), upAddrs)
	if aerr != nil {
		a.log.Warn("the member record names an address other hosts may not reach", "advertise", addr, "error", aerr)
	}
	if webTLS {
		addr = "https://" + addr
	}
	a.log.Info("serving", "listen", ln.Addr().String(), "advertise", addr, "tls", webTLS, "web_config_file", cfg.Agent.WebConfigFile)
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		<-served
	}()

	if err := a.join(ctx, cfg, addr, inherited, store); err != nil {
		if ctx.Err() != nil {
			return nil // asked to stop while joining: a clean stop
		}
		// No job ever started: the guard has nothing to watch.
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.guard.Release(rctx)
		return err
	}
	defer a.leave()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	sopts := supervisor.Options{Config: cfg, Hierarchy: hier, Source: a.src, Runtime: rt, Logger: a.log, Host: a.host,
		Inherited: inherited.Jobs, Tokens: a.tokens, ClaimFile: a.claim}
	if a.guard != nil {
		sopts.Spawner, sopts.Notes = a.guard, a.notes
	}
	a.sup = supervisor.New(sopts)
	close(a.started)
	supDone := make(chan error, 1)
	go func() { supDone <- a.sup.Run(runCtx) }()
	waitUsage := runUsage(runCtx, a.usage, a.usageRead, a.sup.Ready())
	defer func() {
		stop()
		waitUsage()
	}()
	// systemd removes the jobs' scope once it is empty: when the lease
	// guard is gone (it killed every job at a passed deadline, was killed,
	// or the scope was stopped) and so is every job process. No guard can
	// start in it again and no job can run: the agent exits, and the one
	// systemd starts (Restart=) makes the scope anew.
	scopeLost, waitScope := a.watchScope(runCtx, place)
	defer func() {
		stop()
		waitScope()
	}()
	ready := a.sup.Ready()
	for {
		select {
		case serr := <-scopeLost:
			a.log.Error("the jobs' scope is gone: no job can run; the agent exits for systemd to start it again", "scope", place.scope, "error", serr)
			stop()
			a.src.Stopping()
			return errors.Join(serr, <-supDone)
		case <-ready:
			ready = nil
			a.noteAdopted(inherited, a.sup.Adopted())
			close(a.ready)
			a.warnFile(runCtx, cfg, false)
		case serr := <-serveErr:
			err = fmt.Errorf("http server: %w", serr)
			stop()
			a.src.Stopping() // a lease lost from here on fences, and does not rejoin
			return errors.Join(err, <-supDone)
		case <-ctx.Done():
			a.src.Stopping()
			return <-supDone
		}
	}
}

// join connects to the store the cluster lives in (the embedded etcd
// store started when [cluster] names no endpoints), stores the agent
// file's workload (create or update, never delete) and joins as a member
// whose API is at addr, resuming the session in inherited if its lease
// still lives.
func (a *Agent) join(ctx context.Context, cfg *config.Config, addr string, inherited *handover.Inherited, store *embeddedStart) error {
	a.src = source.NewCluster(cfg, a.host, source.Options{Log: a.log, OnRenew: a.registry.Cluster.ObserveRenew,
		OnDeadline: func(t time.Time) { a.guard.Deadline(t.Add(guardLag(cfg.Cluster.SessionTTL))) },
		OnExpiry: func(member string, lease int64, expiry time.Time) {
			a.claim.Set(fencing.Claim{Member: member, Lease: lease, Expiry: expiry})
		},
		Resume: inherited.Session, Record: inherited.SessionFile})
	endpoints := cfg.Cluster.Endpoints
	if store != nil {
		e, err := store.take()
		if err != nil {
			return err
		}
		a.embedded = e
		endpoints = e.Endpoints()
	}
	if err := a.src.Connect(ctx, endpoints); err != nil {
		a.leave()
		return err
	}
	if err := a.applyFile(ctx, cfg); err != nil {
		// The store keeps what it has (another host may have applied a
		// conflicting definition); the agent runs what the cluster says.
		a.log.Error("the file's connectors were not applied to the cluster", "error", err)
	}
	if err := a.src.Join(ctx, addr); err != nil {
		a.leave()
		return err
	}
	return nil
}

// leave closes the source (its claims go with its lease) and stops the
// embedded etcd.
func (a *Agent) leave() {
	a.src.Close()
	if a.embedded != nil {
		a.embedded.Close()
	}
}

// storeFailed is called, on one of the embedded etcd's goroutines, when
// that store cannot go on and the process is about to exit (status 1).
// The claims of this agent's jobs live in that store: none of the jobs may
// run on unseen, so every worker is killed at once (fencing) and every
// cgroup of the agent removed before the exit. Under systemd the unit's
// Restart= starts the agent again, which then reports why the store does
// not start.
func (a *Agent) storeFailed(err error) {
	a.log.Error("the embedded etcd failed: killing every job before the agent exits", "error", err)
	select {
	case <-a.started:
		if ferr := a.sup.Fence(); ferr != nil {
			a.log.Error("kill jobs before exit: processes survived the kill", "error", ferr)
		}
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cerr := a.hier.Cleanup(ctx, cgroup.JobsDir); cerr != nil {
		a.log.Error("remove job cgroups before exit", "error", cerr)
		return
	}
	if gerr := a.guard.Release(ctx); gerr != nil {
		a.log.Error("release the lease guard before exit", "error", gerr)
	}
	if rerr := a.hier.Remove(ctx); rerr != nil {
		a.log.Error("remove the cgroup root before exit", "error", rerr)
	}
}

// Ready is closed once the first reconcile has finished: every assigned job
// has been started (or has failed with a reason).
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Healthy reports whether the supervisor's loop is waiting for work, or
// has been working on one pass for less than its bound (before it starts:
// true). The service manager's watchdog is fed only while it holds.
func (a *Agent) Healthy() bool {
	select {
	case <-a.started:
		return a.sup.Healthy()
	default:
		return true
	}
}

// Handler returns the agent's HTTP API with /metrics, as Run serves it on
// the listen address; nil before Run has opened the hierarchy.
func (a *Agent) Handler() http.Handler {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.handler
}

// Summary is a one-line state of the agent for the service manager's
// STATUS= (systemctl status): jobs by state and the assignment generation.
func (a *Agent) Summary() string {
	var t supervisor.Tally
	if a.backend.started() {
		t = a.sup.Tally()
	}
	jobs := "jobs"
	if t.Running == 1 {
		jobs = "job"
	}
	return fmt.Sprintf("%s; %d %s running, %d failed, %d waiting for a claim, %d other; assignment generation %d",
		a.backend.info().State, t.Running, jobs, t.Failed, t.Waiting, t.Other, t.Generation)
}

// forker is the pid of the process that forks the jobs, the lease guard
// (0: this agent, without one): the claim file is written on its
// children's clock.
func (a *Agent) forker() int {
	if a.guard == nil {
		return 0
	}
	return a.guard.PID()
}

// guardLag is how long after the session's local fencing deadline the
// lease guard kills: half the fencing margin (cluster.FencingMargin). An
// agent that still runs fences first (the cause, then each job, in its
// log); the guard kills what a killed or hung agent left, still half a
// margin before the lease can expire on the server.
func guardLag(ttl time.Duration) time.Duration { return cluster.FencingMargin(ttl) / 2 }
