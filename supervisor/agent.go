// Package supervisor is the berth agent: one loop that turns "what should
// run" (a Source) into "what runs" (workers in cgroups), kills what an
// earlier run left behind, reloads its configuration without harming running
// jobs, and serves per-job metrics and a JSON API.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/limits"
	"github.com/prometheus/client_golang/prometheus"
)

// Agent runs the jobs its Source assigns to it. Create it with New and run
// it with Run; every other method may be called from any goroutine.
type Agent struct {
	log    *slog.Logger
	path   string // configuration file, re-read by Reload
	hier   *cgroup.Hierarchy
	source Source
	static *StaticSource // non-nil when the source is the agent's own [static] table
	member Membership    // the source as a view of the cluster, when it is one

	// fenceMu orders fencing against starting jobs: a start (claim, then
	// worker) holds it shared; fencing holds it exclusively, so that no
	// worker starts after a fence began.
	fenceMu sync.RWMutex
	fencing atomic.Bool // a fence is in progress: no new worker may start

	reloads   chan chan error
	ready     chan struct{}
	busySince atomic.Int64 // unix ns when the loop began its current pass; 0 when idle
	readyMu   sync.Once

	mu      sync.RWMutex // guards everything below; the loop writes, readers read
	cfg     *limits.Config
	jobs    map[string]*job
	groups  map[string]*groupNode
	desired Desired

	metrics *metricsState

	reg *prometheus.Registry // what /metrics exposes; the cluster source joins it once it exists

	logsMu sync.Mutex
	logs   map[string]io.WriteCloser // job ID -> its log file (see jobLog)
}

// Options configure an Agent beyond its configuration file.
type Options struct {
	// Logger receives the agent's structured log; nil: slog.Default().
	Logger *slog.Logger
	// Source overrides the assignment source. nil: the agent is a cluster
	// member over etcd ([cluster]; an embedded etcd when it names no
	// endpoints). A StaticSource runs the file's [static] jobs with no store.
	Source Source
}

// New returns an agent for cfg, whose file is path (re-read on Reload). It
// does not touch cgroups, processes or the store.
func New(cfg *limits.Config, path string, opts Options) *Agent {
	a := &Agent{
		log:     opts.Logger,
		path:    path,
		cfg:     cfg,
		reloads: make(chan chan error),
		ready:   make(chan struct{}),
		jobs:    map[string]*job{},
		groups:  map[string]*groupNode{},
		metrics: newMetricsState(),
		source:  opts.Source,
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	if s, ok := a.source.(*StaticSource); ok {
		a.static = s
	}
	if m, ok := a.source.(Membership); ok {
		a.member = m
	}
	return a
}

// Ready is closed once the first reconcile has finished: every assigned job
// has been started (or has failed with a reason).
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Config returns the configuration in force.
func (a *Agent) Config() *limits.Config {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.cfg
}

// Run opens the cgroup hierarchy, kills whatever an earlier run left in
// <cgroup_root>/jobs, serves HTTP on the configured listen address, and
// reconciles until ctx is cancelled. It then stops every worker, removes
// every cgroup it made and returns nil. It returns an error when the
// hierarchy cannot be opened, leftovers cannot be removed, or the listen
// address cannot be bound; in each case nothing is left running.
func (a *Agent) Run(ctx context.Context) error {
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

	hier, err := cgroup.Open(cfg.Agent.CgroupRoot)
	if err != nil {
		return fmt.Errorf("open cgroup root %q: %w", cfg.Agent.CgroupRoot, err)
	}
	a.hier = hier
	hier.SetLogger(a.log)
	a.log.Info("cgroup hierarchy", "mode", modeName(hier.Mode()), "root", cfg.Agent.CgroupRoot)
	if err := hier.Prepare(); err != nil {
		return fmt.Errorf("prepare cgroup root %q: %w", cfg.Agent.CgroupRoot, err)
	}
	// A job that nobody claims must not run: kill what an earlier run of the
	// agent left behind before anything else (CASES C1).
	if err := hier.Cleanup(ctx, jobsDir); err != nil {
		return fmt.Errorf("remove leftovers under %s/%s: %w", cfg.Agent.CgroupRoot, jobsDir, err)
	}

	// Serve from here on: /healthz answers 503 and /v1/agent "joining"
	// until the agent is a member and has reconciled.
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	a.log.Info("serving", "listen", ln.Addr().String())
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()

	if a.source == nil {
		m, err := a.startMembership(ctx, cfg, ln.Addr().String())
		if err != nil {
			// Leave no cgroup behind: nothing of ours runs yet.
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = hier.Remove(rctx)
			if ctx.Err() != nil {
				return nil // asked to stop while joining: a clean stop
			}
			return err
		}
		defer m.close()
		a.mu.Lock()
		a.source, a.member = m, m
		a.mu.Unlock()
		a.reg.MustRegister(m)
	}

	err = a.loop(ctx, serveErr)

	if m, ok := a.source.(*memberSource); ok {
		m.stopping.Store(true) // a lease lost from here on fences, and does not rejoin
	}
	if stopErr := a.stopAll(); stopErr != nil {
		err = errors.Join(err, stopErr)
	}
	a.closeLogs()
	return err
}

// reloadTimeout bounds the store calls of a reload (applying the file's
// workload, updating the member record).
const reloadTimeout = 5 * time.Second

// readyWait bounds how long the agent waits for a first assignment before
// it reports ready (sd_notify READY=1, /healthz).
const readyWait = 30 * time.Second

func (a *Agent) loop(ctx context.Context, serveErr <-chan error) error {
	// Retry jobs whose cgroup could not be made or whose claim is held.
	retry := time.NewTicker(500 * time.Millisecond)
	defer retry.Stop()
	// Ready once the first reconcile of a published assignment is done
	// (every assigned job started or failed with a reason), or after
	// readyWait if no assignment arrives (a store with no leader yet).
	readyTimer := time.NewTimer(readyWait)
	defer readyTimer.Stop()
	readyC := readyTimer.C
	markReady := func() {
		a.readyMu.Do(func() { close(a.ready) })
		readyC = nil
	}
	settled := func() {
		a.mu.RLock()
		gen := a.desired.Generation
		a.mu.RUnlock()
		if gen > 0 {
			markReady()
		}
	}
	done := a.busy()
	a.reconcile(ctx)
	done()
	settled()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			return fmt.Errorf("http server: %w", err)
		case <-readyC:
			a.log.Warn("no assignment published yet; reporting ready anyway", "waited", readyWait)
			markReady()
		case <-a.source.Changed():
			done := a.busy()
			a.reconcile(ctx)
			done()
			settled()
		case reply := <-a.reloads:
			done := a.busy()
			reply <- a.reload(ctx)
			done()
		case <-retry.C:
			if a.needsRetry() {
				done := a.busy()
				a.reconcile(ctx)
				done()
			}
		}
	}
}

// Reload re-reads the configuration file. A file that fails validation is
// returned as an error and changes nothing; a good one is put in force:
// only the jobs whose definition changed are started, stopped, restarted
// (command, environment, user, restart policy, group) or updated in place
// (limits only). It returns an error when the agent is not running.
func (a *Agent) Reload(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case a.reloads <- reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Agent) reload(ctx context.Context) error {
	cfg, err := limits.Load(a.path)
	if err != nil {
		a.log.Error("reload refused; running jobs left as they were", "config", a.path, "error", err)
		return err
	}
	if m, ok := a.source.(*memberSource); ok {
		// The file's connectors and groups are applied (create or update);
		// the change reaches every agent, this one included, through the
		// store. A refusal leaves the store and the running jobs as they were.
		// Bounded: with the store unreachable the reload is refused in
		// reloadTimeout, and the agent (stop, watchdog) stays responsive.
		sctx, cancel := context.WithTimeout(ctx, reloadTimeout)
		defer cancel()
		if err := m.applyFile(sctx, cfg); err != nil {
			a.log.Error("reload refused; running jobs left as they were", "config", a.path, "error", err)
			return err
		}
		if nm := memberOf(cfg); changedMember(m.declared(), nm) {
			if err := m.update(sctx, nm); err != nil {
				a.log.Error("update the member record with the reloaded [static] table", "error", err)
			} else {
				a.log.Info("member record updated", "connectors", nm.Connectors, "tasks", nm.Tasks, "protocol", nm.Protocol)
			}
		}
	}
	a.mu.Lock()
	old := a.cfg.Agent
	a.cfg = cfg
	a.mu.Unlock()
	a.log.Info("reload accepted", "config", a.path)
	warnRestartOnly(a.log, old, cfg.Agent)
	if a.static != nil {
		a.static.Set(cfg)
	}
	a.reconcile(ctx, true)
	return nil
}

// changedMember reports whether the member record differs: declarations or
// protocol.
func changedMember(a, b assign.Member) bool {
	return a.Protocol != b.Protocol || !slices.Equal(a.Connectors, b.Connectors) || !slices.Equal(a.Tasks, b.Tasks)
}

// warnRestartOnly logs the [agent] settings a reload cannot change: they
// take effect when the agent restarts.
func warnRestartOnly(log *slog.Logger, old, new limits.Agent) {
	for _, c := range []struct {
		key      string
		old, new string
	}{
		{"agent.id", old.ID, new.ID},
		{"agent.listen", old.Listen, new.Listen},
		{"agent.cgroup_root", old.CgroupRoot, new.CgroupRoot},
		{"agent.data_dir", old.DataDir, new.DataDir},
		{"agent.log_dir", old.LogDir, new.LogDir},
	} {
		if c.old != c.new {
			log.Warn("changed setting takes effect only when the agent restarts", "key", c.key, "running", c.old, "file", c.new)
		}
	}
}
