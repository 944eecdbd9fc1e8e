package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/cgroup/memwatch"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/fencing"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/internal/retry"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/supervisor/plan"
	"github.com/berthd/berth/worker"
	"github.com/jonboulle/clockwork"
)

// Agent runs the jobs its Source assigns to it, in cgroups of its
// hierarchy. Create it with New and run it with Run; every other method
// may be called from any goroutine.
type Agent struct {
	log    *slog.Logger
	clock  clockwork.Clock
	hier   *cgroup.Hierarchy
	source source.Source
	tbl    *table
	exec   *executor

	applies chan configChange
	ready   chan struct{}
	// readyOnce closes ready.
	readyOnce sync.Once
	busySince atomic.Int64 // unix ns when the loop began its current pass; 0 when idle

	mu  sync.RWMutex
	cfg *config.Config
}

// configChange is a configuration to put in force, with where to say it is done.
type configChange struct {
	cfg  *config.Config
	done chan struct{}
}

// Options configure an Agent.
type Options struct {
	// Config is the agent file in force at start. Required.
	Config *config.Config
	// Hierarchy is the opened and prepared cgroup hierarchy, with nothing
	// left under its jobs' and groups' subtrees. Required.
	Hierarchy *cgroup.Hierarchy
	// Source says which jobs to run and holds their claims. Required.
	Source source.Source
	// Runtime starts and reaps the workers' processes; the caller closes
	// it after Run returned. Required.
	Runtime *worker.Runtime
	// Spawner starts every run in the lease guard (worker.Spec.Spawner);
	// nil: on the Runtime's launcher threads. Required to adopt a run.
	Spawner worker.Spawner
	// Notes records the jobs waiting to restart for the next agent
	// (worker.Spec.Notes); nil: none are recorded.
	Notes worker.BackoffNotes
	// Tokens is the record of the fencing tokens handed out on this host
	// (package fencing): every run's token (the store revision of its
	// claim's write) is checked against it and written to it before the
	// run starts; nil: runs get no token.
	Tokens *fencing.Record
	// ClaimFile is the claim file every run gets in BERTH_CLAIM_FILE; a run
	// starts only once it holds the session's newest deadline. nil: none.
	ClaimFile *fencing.ClaimFile
	// Inherited is what an earlier agent left (package handover): the
	// first pass that knows the whole assignment adopts, resumes or
	// discards every run and wait in it (plan.Decide), and the passes
	// after it see none.
	Inherited plan.Inherited
	// Logger receives the agent's structured log; nil: slog.Default().
	Logger *slog.Logger
	// Host holds the facts a new definition is checked against before a
	// running job is stopped for it; nil: host.Local().
	Host *host.Host
	// Clock times retries; nil: the real clock.
	Clock clockwork.Clock
}

// New returns an agent. It does not touch cgroups, processes or the store.
func New(opts Options) *Agent {
	a := &Agent{log: opts.Logger, clock: opts.Clock, hier: opts.Hierarchy, source: opts.Source, cfg: opts.Config,
		applies: make(chan configChange), ready: make(chan struct{})}
	if a.log == nil {
		a.log = slog.Default()
	}
	if a.clock == nil {
		a.clock = clockwork.NewRealClock()
	}
	h := opts.Host
	if h == nil {
		h = host.Local()
	}
	a.tbl = newTable(a.clock)
	a.exec = &executor{log: a.log, host: h, rt: opts.Runtime, spawner: opts.Spawner, notes: opts.Notes, inherited: opts.Inherited,
		tokens: opts.Tokens, claimFile: opts.ClaimFile, clock: a.clock, hier: a.hier, source: a.source, tbl: a.tbl}
	return a
}

// startMemWatch starts the memory watcher of the jobs' pressure actions;
// a failure leaves the jobs that need it unable to start, with the
// reason.
func (e *executor) startMemWatch() {
	if e.mem != nil || e.memErr != nil {
		return
	}
	e.mem, e.memErr = memwatch.New()
	if e.memErr != nil {
		e.log.Error("memory pressure watcher; jobs with memory_pressure will not start", "error", e.memErr)
	}
}

// Ready is closed once the first reconcile of a published assignment has
// finished (every assigned job started or failed with a reason), or
// readyWait after Run began when no assignment arrives.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Config returns the configuration in force.
func (a *Agent) Config() *config.Config {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.cfg
}

// readyWait bounds how long the agent waits for a first assignment before
// it reports ready (sd_notify READY=1, /healthz).
const readyWait = 30 * time.Second

// Run reconciles until ctx is cancelled, fencing whenever the source loses
// its membership (also while it stops). It then stops every job with its
// grace and removes every job's and group's cgroup. It returns an error
// when jobs could not be stopped or their cgroups removed.
func (a *Agent) Run(ctx context.Context) error {
	fenceCtx, endFence := context.WithCancel(context.Background())
	fenced := make(chan struct{})
	go func() {
		defer close(fenced)
		a.watchMembership(fenceCtx)
	}()
	a.exec.startMemWatch()
	pressured := make(chan struct{})
	go func() {
		defer close(pressured)
		a.watchPressure(fenceCtx)
	}()
	a.loop(ctx)
	err := a.exec.stopAll(a.Config().Agent.StopTimeout)
	endFence()
	<-fenced
	<-pressured
	if a.exec.mem != nil {
		a.exec.mem.Close()
	}
	return err
}

// loop runs one pass at a time: at start, whenever the source changes, a
// configuration is applied or a retry is due.
func (a *Agent) loop(ctx context.Context) {
	readyTimer := a.clock.NewTimer(readyWait)
	defer readyTimer.Stop()
	readyC := readyTimer.Chan()
	markReady := func() {
		a.readyOnce.Do(func() { close(a.ready) })
		readyC = nil
	}
	// waited is set once readyWait has passed with no assignment: from
	// then on a pass hands over what an earlier agent left even without
	// one, as the ready agent it reports it is.
	waited := false
	// retryTimer fires when the earliest transient failure (a held claim,
	// a store error, a cgroup the kernel was busy with) is due again.
	retryTimer := a.clock.NewTimer(time.Hour)
	retryTimer.Stop()
	defer retryTimer.Stop()
	// settled is closed when the limits of the jobs the last pass adopted
	// are checked (settle.go); nil: no check is running.
	var settled <-chan struct{}
	pass := func(retryFailed bool) {
		a.busySince.Store(time.Now().UnixNano())
		desired := a.source.Desired()
		// An assignment seen before the workload (the store is read in two
		// watches) names jobs the agent cannot start yet, and is not
		// "every assigned job started": what an earlier agent left waits
		// for the whole assignment too.
		complete := desired.Generation > 0 && desired.Workload != nil
		a.exec.reconcile(ctx, a.Config(), desired, retryFailed, complete || waited)
		a.busySince.Store(0)
		if d, ok := a.tbl.nextRetry(); ok {
			retryTimer.Reset(d)
		}
		settled = a.exec.settle.doneC()
		if complete {
			markReady()
		}
	}
	pass(false)
	for {
		select {
		case <-ctx.Done():
			return
		case <-settled:
			// The adopted jobs' limits are checked: a refused one is
			// retried when due.
			settled = nil
			if d, ok := a.tbl.nextRetry(); ok {
				retryTimer.Reset(d)
			}
		case <-readyC:
			a.log.Warn("no assignment published yet; reporting ready anyway", "waited", readyWait)
			waited = true
			if a.exec.inheriting() {
				pass(false) // what an earlier agent left is discarded
			}
			markReady()
		case <-a.source.Changed():
			pass(false)
		case ap := <-a.applies:
			a.mu.Lock()
			a.cfg = ap.cfg
			a.mu.Unlock()
			a.exec.envFiles.Reload() // read every env_file again
			pass(true)
			close(ap.done)
		case <-retryTimer.Chan():
			pass(false)
		}
	}
}

// Adopted is how many runs of an earlier agent the first pass took over
// (worker.Adopt): those whose job is assigned here and claimed, with the
// same command. Once Ready is closed it no longer changes.
func (a *Agent) Adopted() int { return int(a.exec.adopted.Load()) }

// Apply puts cfg, a re-read and validated agent file, in force: only the
// jobs whose definition changed are started, stopped, restarted or updated
// in place, every env_file is read again and every failed job is tried
// again. It returns when the pass is done, or ctx's error first.
func (a *Agent) Apply(ctx context.Context, cfg *config.Config) error {
	ap := configChange{cfg: cfg, done: make(chan struct{})}
	select {
	case a.applies <- ap:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ap.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watchMembership fences on every loss of membership the source delivers:
// every worker is killed at once, retried with backoff while a job's
// processes survive, and only then is the source told it may join again.
func (a *Agent) watchMembership(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case loss := <-a.source.Lost():
			err := retry.Do(ctx, a.clock, retry.Kill(), a.exec.fenceAll, func(err error, _ time.Duration) {
				a.log.Error("fence: a job's processes survived the kill; retrying", "error", err)
			})
			if err != nil {
				return // ctx ended
			}
			loss.Fenced()
		}
	}
}

// Fence kills every worker at once, without grace, and forgets every job,
// as a loss of membership does: for the agent's wiring when the store the
// claims live in fails. It returns an error naming the jobs whose
// processes survived the kill.
func (a *Agent) Fence() error {
	if err := a.exec.fenceAll(); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	return nil
}

// Healthy reports whether the agent's loop is waiting for work, or has been
// working on one pass for less than its bound: every stop in a pass runs
// concurrently, bounded by the longest stop_timeout plus a minute to kill
// and remove cgroups. The service manager's watchdog is fed only while it
// holds (systemd WatchdogSec=).
func (a *Agent) Healthy() bool {
	since := a.busySince.Load()
	if since == 0 {
		return true
	}
	limit := a.tbl.longest(a.Config().Agent.StopTimeout) + time.Minute
	return time.Since(time.Unix(0, since)) < limit
}
