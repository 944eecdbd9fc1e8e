package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/guard"
	"github.com/berthd/berth/metrics"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/worker"
	"github.com/coreos/go-systemd/v22/journal"
	"github.com/jonboulle/clockwork"
)

// Agent runs the jobs its Source assigns to it. Create it with New and run
// it with Run; every other method may be called from any goroutine.
type Agent struct {
	log    *slog.Logger
	path   string // configuration file, re-read by Reload
	host   *config.Host
	clock  clockwork.Clock
	hier   *cgroup.Hierarchy
	source source.Source
	build  [2]string // version, commit

	// fenceMu orders fencing against starting jobs: a start (claim, then
	// worker) holds it shared; fencing holds it exclusively, so that no
	// worker starts after a fence began.
	fenceMu sync.RWMutex
	fencing atomic.Bool // a fence is in progress: no new worker may start

	reloads   chan chan error
	ready     chan struct{}
	busySince atomic.Int64 // unix ns when the loop began its current pass; 0 when idle
	readyMu   sync.Once

	mu       sync.RWMutex // guards everything below; the loop writes, readers read
	cfg      *config.Config
	jobs     map[string]*job
	groups   map[string]*groupNode
	desired  source.Desired
	assigned map[string]bool // IDs of the jobs assigned here (metrics keep their history)
	retries  map[string]*retryState
	conf     confState
	// declWarned is set once the [static] entries have been checked
	// against a known workload (the file's and the store's).
	declWarned bool
	// handled maps a job to the store revision of the restart request this
	// agent has carried out for it, until the request is gone from the
	// store: a request is carried out once even when its removal fails.
	handled map[string]int64

	logs     jobLogs
	envFiles envFiles // the env_files' values, read on this host

	guardCmd []string      // Options.GuardCommand
	guard    *guard.Client // nil: no guard (no GuardCommand)

	registry *metrics.Registry
	handler  http.Handler // the API and /metrics, set by Run before it serves
}

// Options configure an Agent beyond its configuration file.
type Options struct {
	// Logger receives the agent's structured log; nil: slog.Default().
	Logger *slog.Logger
	// Source says which jobs to run. nil: the agent is a cluster member
	// over etcd ([cluster]; an embedded etcd when it names no endpoints).
	Source source.Source
	// Host holds the facts definitions are checked against; nil:
	// worker.LocalHost().
	Host *config.Host
	// Clock times retries; nil: the real clock.
	Clock clockwork.Clock
	// Version and Commit are the agent's build, as GET / reports them.
	Version, Commit string
	// GuardCommand runs the lease guard, `berth guard` ({the berth binary,
	// "guard"}; package guard); nil: no guard is started (a test's agent).
	GuardCommand []string
}

// New returns an agent for cfg, whose file is path (re-read on Reload). It
// does not touch cgroups, processes or the store.
func New(cfg *config.Config, path string, opts Options) *Agent {
	a := &Agent{
		log:      opts.Logger,
		path:     path,
		host:     opts.Host,
		clock:    opts.Clock,
		cfg:      cfg,
		source:   opts.Source,
		reloads:  make(chan chan error),
		ready:    make(chan struct{}),
		jobs:     map[string]*job{},
		groups:   map[string]*groupNode{},
		assigned: map[string]bool{},
		retries:  map[string]*retryState{},
		handled:  map[string]int64{},
		build:    [2]string{opts.Version, opts.Commit},
		guardCmd: opts.GuardCommand,
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.host == nil {
		a.host = worker.LocalHost()
	}
	if a.clock == nil {
		a.clock = clockwork.NewRealClock()
	}
	if a.source == nil {
		a.source = source.NewCluster(cfg, a.host)
	}
	a.conf.started(cfg, a.clock.Now())
	return a
}

// Ready is closed once the first reconcile has finished: every assigned job
// has been started (or has failed with a reason).
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Config returns the configuration in force.
func (a *Agent) Config() *config.Config {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.cfg
}

// Run opens the cgroup hierarchy, kills whatever an earlier run left in
// <cgroup_root>/jobs and <cgroup_root>/groups, serves HTTP on the configured listen address, starts
// its source (joins the cluster) and reconciles until ctx is cancelled. It
// then stops every worker, removes every cgroup it made and returns nil. It
// returns an error when another agent holds its data_dir or cgroup root,
// the hierarchy cannot be opened, leftovers cannot be removed, or the
// listen address cannot be bound; in each case nothing is left running.
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
	// TLS and authentication of the listener: a web configuration that
	// does not load is refused before anything is touched.
	webTLS, err := api.CheckWebConfig(cfg.Agent.WebConfigFile)
	if err != nil {
		return fmt.Errorf("agent.web_config_file: %w", err)
	}

	// The agent reaps every process of every job (a child subreaper):
	// refuse to start if it cannot be one.
	if err := worker.Prepare(); err != nil {
		return fmt.Errorf("start the worker reaper: %w", err)
	}
	hier, err := cgroup.Open(cfg.Agent.CgroupRoot)
	if err != nil {
		return fmt.Errorf("open cgroup root %q: %w", cfg.Agent.CgroupRoot, err)
	}
	a.hier = hier
	hier.SetLogger(a.log)
	a.log.Info("cgroup hierarchy", "mode", hier.Mode().String(), "root", cfg.Agent.CgroupRoot)
	warnJournal(a.log, cfg.Agent.LogSink)
	warnUnsupervised(a.log, cfg)
	if err := hier.Prepare(); err != nil {
		return fmt.Errorf("prepare cgroup root %q: %w", cfg.Agent.CgroupRoot, err)
	}
	// A job that nobody claims must not run: kill what an earlier run of the
	// agent left behind before anything else (failure case C1).
	for _, sub := range cgroup.Subtrees() {
		if err := hier.Cleanup(ctx, sub); err != nil {
			return fmt.Errorf("remove leftovers under %s/%s: %w", cfg.Agent.CgroupRoot, sub, err)
		}
	}
	if err := a.startGuard(ctx); err != nil {
		return err
	}
	defer a.guard.Close()

	a.registry, err = metrics.NewRegistry(a.log, a, a)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	// Serve from here on: /healthz answers 503 and /v1/agent "joining"
	// until the agent is a member and has reconciled.
	h := api.Handler(a, api.Options{Metrics: a.registry.Handler(), Listen: ln.Addr().String(), WebConfigFile: cfg.Agent.WebConfigFile,
		Version: a.build[0], Commit: a.build[1], Cluster: cfg.Cluster.Name})
	a.mu.Lock()
	a.handler = h
	a.mu.Unlock()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	served := make(chan struct{})
	go func() {
		defer close(served)
		serveErr <- api.Serve(ln, srv, cfg.Agent.WebConfigFile, a.log)
	}()
	// Other members reach this agent at the address of its member record:
	// with its scheme when it serves TLS.
	addr := ln.Addr().String()
	if webTLS {
		addr = "https://" + addr
	}
	a.log.Info("serving", "listen", ln.Addr().String(), "tls", webTLS, "web_config_file", cfg.Agent.WebConfigFile)
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		<-served
	}()

	env := source.Env{Log: a.log, Addr: addr, Fence: a.fenceAll,
		OnFence: a.registry.Cluster.Fenced, OnRenew: a.registry.Cluster.ObserveRenew, StoreFailed: a.storeFailed,
		OnDeadline: a.guard.Deadline}
	if err := a.source.Start(ctx, env); err != nil {
		a.source.Close()
		// Leave no cgroup behind: nothing of ours runs yet.
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.releaseGuard(rctx)
		_ = hier.Remove(rctx)
		if ctx.Err() != nil {
			return nil // asked to stop while joining: a clean stop
		}
		return err
	}
	defer a.source.Close()

	err = a.loop(ctx, serveErr)

	a.source.Stopping() // a lease lost from here on fences, and does not rejoin
	if stopErr := a.stopAll(); stopErr != nil {
		err = errors.Join(err, stopErr)
	}
	a.logs.closeAll()
	return err
}

// reloadTimeout bounds the store calls of a reload (applying the file's
// workload, updating the member record).
const reloadTimeout = 5 * time.Second

// readyWait bounds how long the agent waits for a first assignment before
// it reports ready (sd_notify READY=1, /healthz).
const readyWait = 30 * time.Second

func (a *Agent) loop(ctx context.Context, serveErr <-chan error) error {
	// Ready once the first reconcile of a published assignment is done
	// (every assigned job started or failed with a reason), or after
	// readyWait if no assignment arrives (a store with no leader yet).
	readyTimer := a.clock.NewTimer(readyWait)
	defer readyTimer.Stop()
	readyC := readyTimer.Chan()
	markReady := func() {
		a.readyMu.Do(func() { close(a.ready) })
		readyC = nil
	}
	// retryTimer fires when the earliest transient failure (a held claim,
	// a store error, a cgroup the kernel was busy with) is due again.
	retryTimer := a.clock.NewTimer(time.Hour)
	retryTimer.Stop()
	defer retryTimer.Stop()
	pass := func(f func()) {
		done := a.busy()
		f()
		done()
		if d, ok := a.nextRetry(); ok {
			retryTimer.Reset(d)
		}
		if a.reconciledAssignment() {
			markReady()
		}
	}
	pass(func() { a.reconcile(ctx, false) })
	a.warnFile(ctx, a.Config(), false)
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
			pass(func() { a.reconcile(ctx, false) })
			a.warnDeclarations(ctx, false)
		case reply := <-a.reloads:
			pass(func() { reply <- a.reload(ctx) })
		case <-retryTimer.Chan():
			pass(func() { a.reconcile(ctx, false) })
		}
	}
}

// Handler returns the agent's HTTP API with /metrics, as Run serves it on
// the listen address; nil before Run has opened the hierarchy.
func (a *Agent) Handler() http.Handler {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.handler
}

// reconciledAssignment reports whether the agent has reconciled a
// published assignment together with the workload that defines its jobs:
// an assignment seen before the workload (the store is read in two
// watches) names jobs the agent cannot start yet, and is not "every
// assigned job started".
func (a *Agent) reconciledAssignment() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.desired.Generation > 0 && a.desired.Workload != nil
}

// Generation is the generation of the assignment the agent runs.
func (a *Agent) Generation() int64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.desired.Generation
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
	data, err := os.ReadFile(a.path)
	sum := fileHash(data)
	var cfg *config.Config
	if err != nil {
		err = fmt.Errorf("load config %s: %w", a.path, err)
	} else {
		cfg, err = config.Parse(a.path, data, a.host)
	}
	if err == nil {
		// The source stores the file's connectors and groups and its
		// [static] table; a refusal leaves the store and the running jobs
		// as they were. Bounded: with the store unreachable the reload is
		// refused in reloadTimeout, and the agent (stop, watchdog) stays
		// responsive.
		sctx, cancel := context.WithTimeout(ctx, reloadTimeout)
		err = a.source.Reload(sctx, cfg)
		cancel()
	}
	if err != nil {
		a.log.Error("reload refused; running jobs left as they were", "config", a.path, "sha256", sum, "error", err)
		a.mu.Lock()
		a.conf.record(a.clock.Now(), sum, err, nil, nil)
		a.mu.Unlock()
		return err
	}
	a.mu.Lock()
	old := a.cfg
	a.cfg = cfg
	a.mu.Unlock()
	a.envFiles.reload() // read every env_file again
	changes := config.DiffConfig(old, cfg)
	a.log.Info("reload accepted", "config", a.path, "sha256", sum, "changes", len(changes))
	for _, c := range changes {
		a.log.Info("config changed", "key", c.Key, "old", c.Old, "new", c.New)
	}
	warnRestartOnly(a.log, old.Agent, cfg.Agent)
	if old.Agent.LogSink != cfg.Agent.LogSink {
		warnJournal(a.log, cfg.Agent.LogSink)
	}
	a.reconcile(ctx, true)
	warnings := a.warnFile(ctx, cfg, true)
	a.mu.Lock()
	a.conf.record(a.clock.Now(), sum, nil, changes, warnings)
	a.mu.Unlock()
	return nil
}

// warnFile logs the warnings of the file in force and returns them: its
// values that validate but may not mean what was meant, and its [static]
// entries that name no job of the file or of the cluster's store (with
// force, now; else once the source knows the store's workload).
func (a *Agent) warnFile(ctx context.Context, cfg *config.Config, force bool) []*config.Problem {
	var out []*config.Problem
	for _, w := range cfg.Warnings {
		if !strings.HasPrefix(w.Key, "static.") {
			out = append(out, w)
			a.log.Warn("configuration", "warning", w.Error())
		}
	}
	return append(out, a.warnDeclarations(ctx, force)...)
}

// warnDeclarations logs the [static] entries of the file in force that
// name no job of the file or of the cluster's store and returns them.
// Unless force, it does so once, as soon as the source knows a workload.
// The source's desired workload holds only this member's own share, so the
// stored definitions of the declared connectors are read by name
// (Source.Definitions: data proportional to the declarations); when the
// store does not answer within declTimeout, the desired workload is used.
func (a *Agent) warnDeclarations(ctx context.Context, force bool) []*config.Problem {
	a.mu.Lock()
	cfg, wl := a.cfg, a.desired.Workload
	if (!force && a.declWarned) || (wl == nil && !force) {
		a.mu.Unlock()
		return nil
	}
	a.declWarned = a.declWarned || wl != nil
	a.mu.Unlock()
	all := config.Workload{Groups: cfg.Groups, Connectors: cfg.Connectors}
	where := "this file"
	if wl != nil {
		// The file's own definitions are the ones in force after this
		// reload: the store may still hold their previous version (a task
		// count just lowered), which must not satisfy a declaration.
		inFile := map[string]bool{}
		for _, c := range cfg.Connectors {
			inFile[c.Name] = true
		}
		all.Connectors = append([]config.Connector(nil), all.Connectors...)
		stored := wl.Connectors
		dctx, cancel := context.WithTimeout(ctx, declTimeout)
		if d, err := a.source.Definitions(dctx, declaredConnectors(cfg.Static)); err == nil && d != nil {
			stored = append(append([]config.Connector(nil), stored...), d.Connectors...)
		}
		cancel()
		for _, c := range stored {
			if !inFile[c.Name] {
				inFile[c.Name] = true
				all.Connectors = append(all.Connectors, c)
			}
		}
		where = "this file or the cluster's store"
	}
	ws := cfg.CheckDeclarations(&all, where)
	for _, w := range ws {
		a.log.Warn("a [static] declaration names no job; it is ignored until one is defined", "warning", w.Error())
	}
	return ws
}

// declTimeout bounds the store read of warnDeclarations.
const declTimeout = 3 * time.Second

// declaredConnectors is the connector names a [static] table may refer to:
// its connectors, and the connector part of each task ID
// ("<connector>-<n>", config.TaskID), without duplicates.
func declaredConnectors(st config.Static) []string {
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, c := range st.Connectors {
		add(c)
	}
	for _, t := range st.Tasks {
		if i := strings.LastIndexByte(t, '-'); i > 0 {
			if _, err := strconv.Atoi(t[i+1:]); err == nil {
				add(t[:i])
			}
		}
	}
	return out
}

// warnRestartOnly logs the [agent] settings a reload cannot change: they
// take effect when the agent restarts. log_max_size and log_max_files are
// among them: a job's log writer is made once per job and agent run (it
// outlives the job's stops and starts). Not logged, because a reload does
// apply them: stop_timeout (the next stop), log_sink (each job's next
// start) and [agent.client] (every request to a peer reads the settings in
// force).
func warnRestartOnly(log *slog.Logger, old, new config.Agent) {
	for _, c := range []struct {
		key      string
		old, new string
	}{
		{"agent.id", old.ID, new.ID},
		{"agent.listen", old.Listen, new.Listen},
		{"agent.cgroup_root", old.CgroupRoot, new.CgroupRoot},
		{"agent.data_dir", old.DataDir, new.DataDir},
		{"agent.log_dir", old.LogDir, new.LogDir},
		{"agent.log_max_size", strconv.FormatInt(old.LogMaxSize, 10), strconv.FormatInt(new.LogMaxSize, 10)},
		{"agent.log_max_files", strconv.Itoa(old.LogMaxFiles), strconv.Itoa(new.LogMaxFiles)},
		{"agent.web_config_file", old.WebConfigFile, new.WebConfigFile},
	} {
		if c.old != c.new {
			log.Warn("changed setting takes effect only when the agent restarts", "key", c.key, "running", c.old, "file", c.new)
		}
	}
}

// warnUnsupervised warns when a member of a shared etcd (endpoints set) was
// not started by systemd: if this agent is SIGKILLed, the processes its jobs
// forked keep running in their cgroups while the jobs' claims expire with
// its lease, and another member may start the same jobs. Under the packaged
// unit, KillMode=control-group (systemd.kill(5)) kills them with the agent.
// INVOCATION_ID is set by systemd in the environment of every unit it
// starts (systemd.exec(5), "Environment Variables in Spawned Processes").
func warnUnsupervised(log *slog.Logger, cfg *config.Config) {
	if len(cfg.Cluster.Endpoints) == 0 || os.Getenv("INVOCATION_ID") != "" {
		return
	}
	log.Warn("not started by systemd: if this agent is killed with SIGKILL, processes its jobs forked keep running while their claims expire and another member may start the same jobs; run it under the packaged unit (KillMode=control-group) or a supervisor that kills its whole cgroup when it dies")
}

// warnJournal warns when log_sink = "journal" but this host has no journal
// to write to (no /run/systemd/journal/socket, sd_journal_send(3)): jobs'
// output then goes only to their files, and without this line nothing would
// say so.
func warnJournal(log *slog.Logger, sink string) {
	if sink == "journal" && !journal.Enabled() {
		log.Warn("log_sink = \"journal\" but this host has no journal (no /run/systemd/journal/socket): job output goes to the log files only", "key", "agent.log_sink")
	}
}
