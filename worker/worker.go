package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/spec"
	"golang.org/x/sys/unix"
)

// Group is what a worker needs of its job's cgroup; *cgroup.Group
// implements it.
type Group interface {
	// ForkInside runs fork on the calling launcher thread (the one that
	// made home) so that the child is born inside the group in every
	// hierarchy; see cgroup.Group.ForkInside for the contract.
	ForkInside(home *cgroup.Home, fork func(cgroupFD int) (int, error)) (int, error)
	// OOMKills is the kernel's count of OOM kills in the group.
	OOMKills() (uint64, error)
	// Kill kills every process in the group and returns once it is empty.
	Kill(ctx context.Context) error
	// Signal sends sig to every process in the group and returns how
	// many it signalled (a stop in kill mode control-group).
	Signal(sig unix.Signal) (int, error)
	// SignalUnfrozen is Signal without freezing the group first (a stop
	// for memory pressure, whose throttled tasks freeze late).
	SignalUnfrozen(sig unix.Signal) (int, error)
	// RelaxMemoryHigh lifts memory.high for a stop for memory pressure
	// and returns how to put it back (nil: nothing was lifted).
	RelaxMemoryHigh() (restore func() error, err error)
	// Pids lists every process in the group (a stop waits until none is
	// left, or its grace is over).
	Pids() ([]int, error)
}

var _ Group = (*cgroup.Group)(nil)

// Spec is the whole contract of one worker.
type Spec struct {
	// JobID names the job ("orders-sink", "orders-sink-0"); it appears in
	// errors.
	JobID string
	// Path is the command (command[0]). A name without a slash is looked up
	// in the PATH of Env (DefaultPath when Env sets none).
	Path string
	// Args is the full argv, Args[0] included; empty means {Path}.
	Args []string
	// Env is the job's environment ("KEY=value"), completed as systemd
	// completes a service's: PATH=DefaultPath when Env sets no PATH, and
	// with User also USER, LOGNAME, HOME and SHELL from the user's passwd
	// entry, each only when Env does not set it (see jobEnv).
	Env []string
	// Dir is the working directory; "" means the agent's.
	Dir string
	// User runs the job as "user" or "user:group", names or numeric ids;
	// supplementary groups are the user's. "" runs it as the agent.
	User string
	// Restart is the restart policy (systemd Restart=); "" means
	// spec.RestartNever.
	Restart spec.Restart
	// Backoff shapes restart delays; zero fields take DefaultBackoff()'s.
	Backoff Backoff
	// StopTimeout is the grace in Stop between KillSignal and killing the
	// cgroup; 0 means spec.DefaultStopTimeout.
	StopTimeout time.Duration
	// KillMode is which processes Stop signals (systemd's KillMode=, see
	// spec.KillMode): the whole cgroup (control-group), or the main
	// process only (mixed, process); "" means spec.DefaultKillMode.
	KillMode spec.KillMode
	// KillSignal is the signal Stop sends first (systemd's KillSignal=);
	// 0 means SIGTERM.
	KillSignal unix.Signal
	// Log receives the job's stdout and stderr, each chunk as the job wrote
	// it, plus the agent's "berth: ..." marker lines. When LogFile is set
	// too, output goes to both (a file and the journal, say); when both are
	// unset, output is discarded.
	Log io.Writer
	// LogFile is the rotating log file used when Log is nil and Path is set.
	LogFile LogConfig
	// OnChange, when set, is called with a snapshot after every change of
	// State (from the goroutine of the worker's current step, one call at a
	// time; it must not block and must
	// not call Stop): the agent logs starts, exits, restarts and failures.
	OnChange func(Status)
	// Group is the job's cgroup (a *cgroup.Group); required. The worker
	// never deletes it: the caller does, after Stop.
	Group Group
	// Runtime starts the job's processes and reads their output; required.
	// It must stay open until the worker has ended (Done).
	Runtime *Runtime
	// Spawner, when set, starts every run in the lease guard instead of on
	// the Runtime's launcher threads (live restart); required by Adopt.
	Spawner Spawner
	// Notes, when set, is told when the job enters and leaves a backoff,
	// for the next agent (Resume).
	Notes BackoffNotes
	// Token, when set, returns the fencing token of the run the worker is
	// about to start (docs/fencing.md): called before every run it starts,
	// before the run waits for a start slot, never for a run it adopts
	// (which keeps Run.Token). The run gets it in BERTH_FENCING_TOKEN and
	// its Status.Token. An error (the store unreachable, the claim not
	// proven, a token that would go back, a record that cannot be written)
	// means the run must not start: the worker backs off with the error as
	// its Status.Reason and asks again, for as long as it is not stopped
	// (not counted as a failed start: such a worker is never Failed for
	// it). ctx ends when the worker is stopped.
	Token func(ctx context.Context) (uint64, error)
	// ClaimFile, when set, is the claim file every run gets in
	// BERTH_CLAIM_FILE (package fencing).
	ClaimFile string
	// Remake, when set, makes the job's cgroup again, with the job's
	// limits, where it is gone (removed from outside: docs/cases.md C33),
	// and returns the directories it made (none: the cgroup was whole).
	// The worker calls it before every restart, so that a job whose
	// cgroup vanished between two runs starts again by its policy rather
	// than failing for good. Errors: the cgroup cannot be made; the
	// restart then fails as a start does. nil: the cgroup is taken as it
	// is.
	Remake func() ([]string, error)
	// RunEnv is environment every run gets that is not part of the
	// job's Fingerprint, since it names the job's cgroup as this host
	// mounts it: memory_pressure = "notify"'s $MEMORY_PRESSURE_WATCH and
	// $MEMORY_PRESSURE_WRITE (memwatch.Notify).
	RunEnv []string
	// AdoptAfter, for a worker made by Adopt, holds back the adoption's
	// own work (the log pipe read on, the OOM kill count read, the mark in
	// the job's log, the exit watched) until it is closed: the agent
	// closes it once every run of the hand-over is handed to its worker,
	// so that the report of a hand-over of thousands of runs does not wait
	// for that work. An exit meanwhile is kept by the spawner and handled
	// then. nil: no wait.
	AdoptAfter <-chan struct{}
}

// Worker supervises the runs of one job: start inside the cgroup, wait for
// the main process, kill what is left in the cgroup, then restart after a
// backoff or end, as Spec.Restart says. A run that cannot start (missing or
// non-executable command, unknown user or group, bad working directory, a
// cgroup that refuses the process) leaves the worker Failed with the
// reason and is not retried: such errors do not heal by waiting, and the
// supervisor makes a new Worker when the job's definition changes. A start
// that fails for a reason that passes (TransientStart: a shortage of
// descriptors, processes or memory, a child SIGKILLed before it execs and
// not by an OOM kill) backs off and is tried again, maxStartRetries times
// in a row at most. At most startSlots starts of a Runtime are under way
// at once; a worker waits for a slot before its step, so that the wait
// holds up neither Stop nor Retune. Its methods are safe for concurrent
// use.
//
// A worker keeps no goroutine while its job runs or waits to restart: each
// step (start a run, the main process's exit, a stop, the end of a grace
// period or of a backoff) runs when its event comes, in a short-lived
// goroutine or a timer's, one step at a time (step).
type Worker struct {
	spec Spec

	startOnce sync.Once
	stopOnce  sync.Once
	entered   bool          // counted by Spec.Runtime (enter) until done is closed
	adopted   *Adoptable    // the run to take over (Adopt), for begin
	pending   *Pending      // the restart wait to carry on (Resume), for begin
	stopCh    chan struct{} // closed by Stop
	done      chan struct{} // closed when the worker has ended and its log copy too
	// life ends when Stop is called: it bounds a Token call.
	life    context.Context
	endLife context.CancelFunc

	mu     sync.Mutex
	status Status

	// step serialises the worker's steps; the fields below belong to it.
	step      sync.Mutex
	logs      *logPipe
	run       *proc       // the current run; nil between runs
	runs      uint64      // numbers the runs: an exit names its run
	timer     *time.Timer // a stop's grace period or wait for the cgroup to empty, or a restart's backoff
	timers    uint64      // numbers the timers: a timer's step names it
	graceEnd  time.Time   // when the grace of a stop under way is over
	draining  *Exit       // a stop's main process has exited, with this; the rest of the cgroup may still run
	drainPoll time.Duration
	delay     time.Duration
	started   time.Time
	oomBefore uint64
	oomErr    error
	retries   int  // starts in a row that failed for a reason that passes (retryStart)
	waits     int  // token waits in a row (tokenWait): a restart counts once
	stopping  bool // Stop was called
	ended     bool
	// pressure is the cause of a stop for memory pressure under way
	// (PressureStop), for the run's exit; "" when none is. relaxed puts
	// back the memory.high that stop lifted, once the run has exited.
	pressure string
	relaxed  func() error
}

// New returns a worker for s in state Stopped whose Start starts a new
// run; it does not start it.
func New(s Spec) *Worker {
	if s.StopTimeout <= 0 {
		s.StopTimeout = spec.DefaultStopTimeout
	}
	if s.Restart == "" {
		s.Restart = spec.RestartNever
	}
	if s.KillMode == "" {
		s.KillMode = spec.DefaultKillMode
	}
	if s.KillSignal == 0 {
		s.KillSignal = unix.SIGTERM
	}
	s.Backoff = s.Backoff.withDefaults()
	w := &Worker{
		spec:   s,
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
		status: Status{State: Stopped},
	}
	w.life, w.endLife = context.WithCancel(context.Background())
	return w
}

// Adopt returns a worker for s in state Stopped whose Start takes over
// run, a run of the job an earlier agent started through s.Spawner with
// the same command (the caller compared the fingerprints: plan.Decide):
// it reads on from the run's log pipe and waits for its exit, keeping its
// pid, start time and restart count; a run that has exited meanwhile has
// its exit handled at once by the restart policy. It does not start it.
//
// The worker is Running from the moment Adopt returns, with the run's
// pid, start time, restart count and fencing token: the run goes on
// whatever its adoption does next, and a hand-over of thousands of runs
// is reported as soon as each is handed to its worker (docs/live-restart.md).
// No OnChange call reports this state (the caller logs the adoption).
func Adopt(s Spec, run Adoptable) *Worker {
	w := New(s)
	w.adopted = &run
	w.status = Status{State: Running, PID: run.Run.PID, StartedAt: run.Run.StartedAt, Restarts: run.Run.Restarts, Token: run.Run.Token}
	return w
}

// Resume returns a worker for s in state Stopped whose Start carries on
// the backoff the job had under an earlier agent, with the same command
// (the caller compared the fingerprints: plan.Decide): the restart count
// and last exit it had, the restart at the time it was due (at once if
// that has passed), the next delay grown from the one in force. It does
// not start it.
func Resume(s Spec, p Pending) *Worker {
	w := New(s)
	w.pending = &p
	return w
}

// Start starts the first run (in a goroutine that ends once the job's
// process is running), or takes over the adopted run, or begins the
// resumed backoff, and returns at once; Status reports the progress. A
// second Start, or a Start after Stop, does nothing.
func (w *Worker) Start() {
	w.startOnce.Do(func() {
		select {
		case <-w.stopCh:
			close(w.done)
			return
		default:
		}
		if w.spec.Runtime == nil {
			w.fail(errors.New("no worker runtime"))
			close(w.done)
			return
		}
		if err := w.spec.Runtime.enter(); err != nil {
			w.fail(err)
			close(w.done)
			return
		}
		w.entered = true
		// The count carried over shows from the first answer on.
		w.setState(func(s *Status) {
			if w.adopted == nil { // an adopted run is Running already (Adopt)
				s.State = Starting
			}
			if p := w.pending; p != nil {
				s.Restarts, s.LastExit = p.Restarts, p.LastExit
			}
		})
		go w.begin()
	})
}

// Stop ends the worker: it cancels a pending restart, sends KillSignal to
// the processes KillMode names, and gives them StopTimeout of grace:
//
//   - control-group: every process of the cgroup is signalled, and the
//     stop waits until the cgroup is empty (not only the main process);
//   - mixed: the main process is signalled; once it has exited, the rest
//     of the cgroup is killed at once;
//   - process: the main process is signalled; the others are left alone
//     until the cgroup is empty.
//
// When the grace is over, every process left in the cgroup is killed
// (Group.Kill). Stop returns once the group is empty and the log copy has
// ended: whatever the mode, no process of the job outlives it. It does
// not delete the cgroup. It is idempotent and returns nil
// once the worker has ended, or ctx's error if ctx ends first (the worker
// keeps stopping). A worker that had already Exited or Failed keeps that
// state.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() {
		close(w.stopCh)
		w.endLife()
		go w.stop()
	})
	w.startOnce.Do(func() { close(w.done) }) // never started: nothing to wait for
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop worker %s: %w", w.spec.JobID, ctx.Err())
	}
}

// Retune sets the restart policy and how a worker that may be running is
// stopped (grace, kill mode, stop signal), as systemd applies a unit's
// Restart=, TimeoutStopSec=, KillMode= and KillSignal= on daemon-reload:
// the current process keeps running, and the new values take effect at its
// next exit (restart) or next Stop (the others). A restart "" means
// spec.RestartNever, a stopTimeout <= 0 spec.DefaultStopTimeout, a
// mode "" spec.DefaultKillMode, a sig 0 SIGTERM. A Stop already under
// way keeps what it began with. Safe for concurrent use: it runs as one
// of the worker's steps.
func (w *Worker) Retune(restart spec.Restart, stopTimeout time.Duration, mode spec.KillMode, sig unix.Signal) {
	if stopTimeout <= 0 {
		stopTimeout = spec.DefaultStopTimeout
	}
	if restart == "" {
		restart = spec.RestartNever
	}
	if mode == "" {
		mode = spec.DefaultKillMode
	}
	if sig == 0 {
		sig = unix.SIGTERM
	}
	w.step.Lock()
	defer w.step.Unlock()
	w.spec.Restart, w.spec.StopTimeout, w.spec.KillMode, w.spec.KillSignal = restart, stopTimeout, mode, sig
}

// Done is closed when the worker has ended for good: Stopped, Exited or
// Failed, with no process and no log copier left.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Status returns a snapshot of the worker.
func (w *Worker) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.status
	if s.LastExit != nil {
		e := *s.LastExit
		s.LastExit = &e
	}
	return s
}

func (w *Worker) setState(f func(*Status)) {
	w.mu.Lock()
	prev := w.status.State
	f(&w.status)
	snap := w.status
	w.mu.Unlock()
	if w.spec.OnChange != nil && snap.State != prev {
		if snap.LastExit != nil {
			e := *snap.LastExit
			snap.LastExit = &e
		}
		w.spec.OnChange(snap)
	}
}

// begin is the first step: open the log, start the first run (with a
// start slot taken before the step), adopt an earlier agent's run, or
// carry on its restart wait.
func (w *Worker) begin() {
	newRun := w.adopted == nil && w.pending == nil
	// An adoption's work takes a slot (adoptSlots), then waits for
	// AdoptAfter: thousands of adoptions at once, or woken at once, would
	// leave the agent no CPU to answer its API. Stopped meanwhile, it
	// goes on at once (adopt then stops the run).
	if w.adopted != nil {
		if r := w.spec.Runtime.adoptSlot(w.stopCh); r != nil {
			defer r()
		}
		if g := w.spec.AdoptAfter; g != nil {
			select {
			case <-g:
			case <-w.stopCh:
			}
		}
	}
	var (
		tok  uint64
		terr error
	)
	if newRun {
		tok, terr = w.spec.nextToken(w.life)
	}
	var release func()
	if newRun && terr == nil {
		if release = w.spec.Runtime.startSlot(w.stopCh); release != nil {
			defer release()
		}
	}

	w.step.Lock()
	defer w.step.Unlock()
	if newRun && terr == nil && release == nil { // stopped while waiting for a slot
		w.setState(func(s *Status) { s.State, s.NextRestart = Stopped, time.Time{} })
		w.end()
		return
	}
	if w.spec.Group == nil {
		w.fail(errors.New("no cgroup"))
		w.end()
		return
	}
	if a := w.adopted; a != nil {
		w.adopted = nil
		w.adopt(*a)
		return
	}
	logs, err := w.spec.openLog(nil)
	if err != nil {
		w.fail(err)
		w.end()
		return
	}
	w.logs = logs
	if p := w.pending; p != nil {
		// Carry on the backoff of an earlier agent's worker of the job:
		// its restart count, last exit, delay and due time.
		w.pending = nil
		if w.stopping {
			w.setState(func(s *Status) { s.State = Stopped })
			w.end()
			return
		}
		w.delay = p.Delay
		w.setState(func(s *Status) {
			s.State, s.Restarts, s.LastExit, s.NextRestart = BackingOff, p.Restarts, p.LastExit, p.NextRestart
		})
		w.logs.mark("restarting in %s: the backoff of an earlier agent (%d restarts so far)", max(0, time.Until(p.NextRestart)).Round(time.Millisecond), p.Restarts)
		w.spec.noteWaiting(w.Status(), w.delay)
		w.timers++
		tn := w.timers
		w.timer = time.AfterFunc(time.Until(p.NextRestart), func() { w.restart(tn) })
		return
	}
	if terr != nil {
		w.tokenWait(terr)
		return
	}
	w.startRun(release, tok)
}

// nextToken returns the fencing token of the run about to start
// (Spec.Token, asked under ctx, the worker's life; 0 without one). It is
// called without the worker's step lock.
func (s *Spec) nextToken(ctx context.Context) (uint64, error) {
	if s.Token == nil {
		return 0, nil
	}
	tok, err := s.Token(ctx)
	if err != nil {
		return 0, fmt.Errorf("fencing token: %w", err)
	}
	return tok, nil
}

// tokenWait is the step after a run that may not start for want of its
// fencing token (err): the worker backs off as after a failed start that
// passes, its state BackingOff with the reason, and asks again, for as
// long as it is not stopped. step is held.
func (w *Worker) tokenWait(err error) {
	if w.stopping {
		w.setState(func(s *Status) { s.State, s.NextRestart = Stopped, time.Time{} })
		w.end()
		return
	}
	w.waits++
	w.delay = w.spec.Backoff.next(w.delay, 0)
	next := time.Now().Add(w.delay)
	w.setState(func(s *Status) { s.State, s.PID, s.Reason, s.NextRestart = BackingOff, 0, err.Error(), next })
	w.logs.mark("not started: %v: trying again in %s", err, w.delay)
	w.spec.noteWaiting(w.Status(), w.delay)
	w.timers++
	tn := w.timers
	w.timer = time.AfterFunc(time.Until(next), func() { w.restart(tn) })
}

// startRun starts one run; step is held. A stop that came meanwhile ends
// the worker (before the run) or terminates the run (after). release gives
// back the start slot the caller took before the step (Runtime.startSlot);
// nil: startRun takes one itself, waiting with step held (a rare path: an
// adopted run whose log cannot be read). It gives the slot back once the
// fork has returned. It reports whether the start failed for a reason that
// passes and the worker now backs off to try again (retryStart). token is
// the run's fencing token (Spec.Token).
func (w *Worker) startRun(release func(), token uint64) (retrying bool) {
	if w.stopping {
		w.setState(func(s *Status) { s.State, s.NextRestart = Stopped, time.Time{} })
		w.end()
		return false
	}
	if release == nil {
		if release = w.spec.Runtime.startSlot(w.stopCh); release == nil { // stopped while waiting
			w.setState(func(s *Status) { s.State, s.NextRestart = Stopped, time.Time{} })
			w.end()
			return false
		}
	}
	defer release()
	w.oomBefore, w.oomErr = w.spec.Group.OOMKills()
	w.started, w.waits = time.Now(), 0
	w.setState(func(s *Status) {
		s.State, s.StartedAt, s.NextRestart, s.Token = Starting, w.started, time.Time{}, token
	})
	w.runs++
	n := w.runs
	// The exit may come before spawn returns; exited then waits for step,
	// which this step holds until the run is recorded.
	onExit := func(ws unix.WaitStatus) { go w.exited(n, ws) }
	var (
		p   *proc
		err error
	)
	// The run's stdout and stderr, and the agent's line that it started:
	// the only write end the agent holds, for as long as the start takes.
	logw, err := w.logs.writer()
	if err == nil {
		extra := w.spec.runEnv(token)
		if sp := w.spec.Spawner; sp != nil {
			p, err = w.spec.spawnVia(sp, Run{StartedAt: w.started, Restarts: w.Status().Restarts, Token: token}, extra, logw, w.logs.rfd, onExit)
		} else {
			s := w.spec
			s.Env = append(s.Env[:len(s.Env):len(s.Env)], extra...)
			p, err = spawn(&s, w.spec.Group, logw, onExit)
		}
		if err != nil {
			markTo(logw, "start failed: %v", err)
		}
	}
	release() // the fork has returned
	if err != nil {
		if logw != nil {
			_ = logw.Close()
		}
		killGroup(w.spec.Group, w.logs)
		if !TransientStart(err) && w.spec.remadeAfterStart(w.logs) {
			err = TransientStartError(fmt.Sprintf("%v (the job's cgroup was removed during the start, and is made again)", err))
		}
		if w.passes(err) {
			w.retryStart(err)
			return true
		}
		if w.retries > 0 {
			err = fmt.Errorf("%w (after %d tries)", err, w.retries+1)
		}
		w.fail(err)
		w.end()
		return false
	}
	w.retries = 0
	// The job is already running: its first lines may come before this.
	markTo(logw, "started pid %d", p.pid)
	_ = logw.Close()
	w.setState(func(s *Status) { s.State, s.PID, s.Reason = Running, p.pid, "" })
	w.run = p
	if w.stopping {
		w.terminate(p)
	}
	return false
}

// maxStartRetries bounds the starts in a row that fail for a reason that
// passes: the next such failure leaves the job Failed with the reason, as
// systemd's StartLimitBurst= ends a unit's restarts (with the backoff
// doubling from 1 s to 60 s, ten tries span about five minutes).
const maxStartRetries = 10

// passes reports whether the failed start err is tried again: a reason
// that passes (TransientStart), not the job's own memory limit (an OOM
// kill in the job's cgroup during the start: its exec does not fit), no
// Stop asked for, and fewer than maxStartRetries such failures in a row.
// step is held.
func (w *Worker) passes(err error) bool {
	if !TransientStart(err) || w.retries >= maxStartRetries {
		return false
	}
	select {
	case <-w.stopCh:
		return false
	default:
	}
	if w.oomErr == nil {
		if n, oerr := w.spec.Group.OOMKills(); oerr == nil && n > w.oomBefore {
			return false
		}
	}
	return true
}

// exited is the step after run n's main process ended with ws: clean the
// cgroup, then end, or restart after a backoff.
func (w *Worker) exited(n uint64, ws unix.WaitStatus) {
	w.step.Lock()
	defer w.step.Unlock()
	p := w.run
	if p == nil || w.runs != n {
		panic(fmt.Sprintf("worker %s: exit of run %d, current run %d (%v)", w.spec.JobID, n, w.runs, p))
	}
	w.run = nil
	if w.timer != nil {
		w.timer.Stop() // a stop's grace period
		w.timer = nil
	}
	// Once this step has recorded the exit, the Spawner may drop the run.
	defer w.spec.forget(p)
	exitAt := time.Now()
	if w.stopping && w.spec.KillMode != spec.KillMixed && exitAt.Before(w.graceEnd) {
		// A stop in mode control-group or process: the rest of the cgroup
		// keeps what is left of the grace (systemd waits for the whole
		// cgroup as well).
		exit := exitFromStatus(ws, exitAt, false)
		w.logs.mark("exited pid %d: %s", p.pid, exit.Reason)
		w.setState(func(s *Status) { s.PID, s.LastExit = 0, &exit })
		w.draining, w.drainPoll = &exit, drainPollMin
		w.drain()
		return
	}
	killGroup(w.spec.Group, w.logs) // a job's descendants never outlive it
	oom := false
	if ws.Signaled() && ws.Signal() == unix.SIGKILL && w.oomErr == nil {
		if n, err := w.spec.Group.OOMKills(); err == nil && n > w.oomBefore {
			oom = true
		}
	}
	exit := exitFromStatus(ws, exitAt, oom)
	if w.pressure != "" {
		exit.MemoryPressure = w.pressure
		exit.Reason += " (memory pressure: " + w.pressure + ")"
		w.pressure = ""
	}
	if w.relaxed != nil {
		if err := w.relaxed(); err != nil {
			w.logs.mark("%v", err)
		}
		w.relaxed = nil
	}
	w.logs.mark("exited pid %d: %s", p.pid, exit.Reason)

	if w.stopping {
		w.setState(func(s *Status) { s.State, s.PID, s.LastExit = Stopped, 0, &exit })
		w.end()
		return
	}
	if !restarts(w.spec.Restart, exit) {
		w.setState(func(s *Status) { s.State, s.PID, s.LastExit = Exited, 0, &exit })
		w.end()
		return
	}
	// The delay counts from the exit, so cleaning the cgroup is part of it.
	w.delay = w.spec.Backoff.next(w.delay, exitAt.Sub(w.started))
	next := exitAt.Add(w.delay)
	w.setState(func(s *Status) { s.State, s.PID, s.LastExit, s.NextRestart = BackingOff, 0, &exit, next })
	w.logs.mark("restarting in %s", w.delay)
	w.spec.noteWaiting(w.Status(), w.delay)
	w.timers++
	tn := w.timers
	w.timer = time.AfterFunc(time.Until(next), func() { w.restart(tn) })
}

// retryStart is the step after a start that failed for a reason that
// passes (TransientStart): the job backs off as after an exit, whatever
// its restart policy (the run never began), and is started again. A
// start cut short by the loss of the lease guard (ErrStartInterrupted)
// is not counted against maxStartRetries. step is held.
func (w *Worker) retryStart(err error) {
	if !errors.Is(err, ErrStartInterrupted) { // not the job's failure
		w.retries++
	}
	w.delay = w.spec.Backoff.next(w.delay, 0)
	next := time.Now().Add(w.delay)
	w.setState(func(s *Status) { s.State, s.PID, s.Reason, s.NextRestart = BackingOff, 0, err.Error(), next })
	w.logs.mark("start failed (%v): trying again in %s", err, w.delay)
	w.spec.noteWaiting(w.Status(), w.delay)
	w.timers++
	tn := w.timers
	w.timer = time.AfterFunc(time.Until(next), func() { w.restart(tn) })
}

// remake makes the job's cgroup again before a restart when it is gone
// (Spec.Remake), and says so in the job's log (logs); a failure is told
// there too, and the start that follows fails with its own reason. The
// worker's step lock is held.
func (s *Spec) remake(logs *logPipe) {
	if s.Remake == nil {
		return
	}
	made, err := s.Remake()
	switch {
	case err != nil:
		logs.mark("the job's cgroup is gone and could not be made again: %v", err)
	case len(made) > 0:
		logs.mark("the job's cgroup was gone (removed from outside): made again with its limits")
	}
}

// remadeAfterStart reports whether a start that failed found the job's
// cgroup gone, and made it again (Spec.Remake): it was removed while the
// start was under way (a lease guard past its deadline removes every job's
// cgroup as it exits, as an agent, fenced, joins again and starts its
// jobs anew; or an operator), and the start is tried again, as a restart
// after such a removal is (C33). It says so in the job's log (logs). The
// worker's step lock is held.
func (s *Spec) remadeAfterStart(logs *logPipe) bool {
	if s.Remake == nil {
		return false
	}
	made, err := s.Remake()
	if err != nil {
		logs.mark("the job's cgroup is gone and could not be made again: %v", err)
		return false
	}
	if len(made) == 0 {
		return false
	}
	logs.mark("the job's cgroup was removed during the start: made again with its limits; the start is tried again")
	return true
}

// restart is the step at the end of backoff timer n, with a start slot
// taken before it. A retried start (retryStart) does not count as a
// restart.
func (w *Worker) restart(n uint64) {
	// Timer n must still be the worker's own: no stop or later timer came
	// since it was set.
	w.step.Lock()
	due := w.timer != nil && w.timers == n && !w.ended && !w.stopping
	w.step.Unlock()
	if !due {
		return
	}
	// The token first, then the slot: a store round trip and a write of
	// the record hold up no other start.
	tok, terr := w.spec.nextToken(w.life)
	var release func()
	if terr == nil {
		if release = w.spec.Runtime.startSlot(w.stopCh); release != nil {
			defer release()
		}
	}
	w.step.Lock()
	defer w.step.Unlock()
	if w.timer == nil || w.timers != n || w.ended || w.stopping || terr == nil && release == nil {
		return // cancelled by a stop (which, if still to come, ends the wait)
	}
	w.timer = nil
	if w.retries == 0 && w.waits == 0 {
		w.setState(func(s *Status) { s.Restarts++ })
	}
	if terr != nil {
		w.tokenWait(terr)
		return
	}
	w.spec.remake(w.logs)
	if !w.startRun(release, tok) {
		// After the start: an agent that dies before it leaves the wait
		// noted, and the next one finds the run the guard holds (it
		// wins). A start that backs off again keeps its note.
		w.spec.noteDone()
	}
}

// stop is the step of Stop: terminate the run, or cancel the restart.
func (w *Worker) stop() {
	w.step.Lock()
	defer w.step.Unlock()
	w.stopping = true
	switch {
	case w.ended:
	case w.run != nil:
		w.terminate(w.run)
	case w.timer != nil: // backing off
		w.timer.Stop()
		w.timer = nil
		w.setState(func(s *Status) { s.State, s.NextRestart, s.Reason = Stopped, time.Time{}, "" })
		w.spec.noteDone()
		w.end()
	}
	// Otherwise the first run has not begun: startRun sees stopping.
}

// PressureStop stops the current run because the job's memory is under
// pressure (memory_pressure = "restart"), cause saying so with the
// figures that triggered it: KillSignal to the processes KillMode names,
// StopTimeout of grace, then the cgroup killed, as Stop does; but the
// worker goes on: the run's exit carries cause (Exit.MemoryPressure, and
// in Exit.Reason), counts as a failure, and the restart policy applies.
// It returns when the stop signal was sent, and false when nothing was
// signalled: no run is Running (starting, backing off, ended), a Stop or
// another pressure stop is under way. It runs as one of the worker's
// steps and waits for the one under way.
//
// since is when the pressure began: one that began before the run did
// (the job's cgroup holds every run, and a stall of the run before can
// reach into the next one's first window) is not this run's, and
// signals nothing.
func (w *Worker) PressureStop(cause string, since time.Time) (sent time.Time, ok bool) {
	w.step.Lock()
	defer w.step.Unlock()
	if w.ended || w.stopping || w.run == nil || w.pressure != "" || since.Before(w.started) {
		return time.Time{}, false
	}
	w.pressure = cause
	w.logs.mark("memory pressure: %s; stopping the run gracefully, then restart policy %s", cause, w.spec.Restart)
	// A run throttled at memory.high would run its stop handler in fits:
	// memory.max alone bounds it until it has exited.
	if restore, err := w.spec.Group.RelaxMemoryHigh(); err != nil {
		w.logs.mark("memory.high not lifted for the stop: %v", err)
	} else if restore != nil {
		w.relaxed = restore
		w.logs.mark("memory.high lifted until the run has exited")
	}
	w.terminate(w.run)
	return time.Now(), true
}

// drainPollMin and drainPollMax bound the interval between looks at the
// cgroup while a stop waits for it to empty after its main process exited.
const (
	drainPollMin = 5 * time.Millisecond
	drainPollMax = 100 * time.Millisecond
)

// terminate sends KillSignal to the processes KillMode names and, if the
// main process has not exited after StopTimeout, kills the whole cgroup;
// its exit then comes to exited as any other. step is held.
func (w *Worker) terminate(p *proc) {
	if w.timer != nil { // the grace of a pressure stop under way: this stop's own replaces it
		w.timer.Stop()
	}
	w.setState(func(s *Status) { s.State = Stopping })
	w.graceEnd = time.Now().Add(w.spec.StopTimeout)
	sig := unix.SignalName(w.spec.KillSignal)
	if w.spec.KillMode == spec.KillControlGroup {
		signal := w.spec.Group.Signal
		if w.pressure != "" && !w.stopping {
			signal = w.spec.Group.SignalUnfrozen
		}
		n, err := signal(w.spec.KillSignal)
		if err != nil {
			w.logs.mark("stopping pid %d: %s to the cgroup: %v; sending it to the main process", p.pid, sig, err)
			_ = unix.Kill(p.pid, w.spec.KillSignal)
		} else {
			w.logs.mark("stopping pid %d: %s to every process of the cgroup (%d), grace %s", p.pid, sig, n, w.spec.StopTimeout)
		}
	} else {
		w.logs.mark("stopping pid %d: %s to the main process (kill_mode %s), grace %s", p.pid, sig, w.spec.KillMode, w.spec.StopTimeout)
		_ = unix.Kill(p.pid, w.spec.KillSignal) // ESRCH: already exited, its status is on its way
	}
	w.timer = time.AfterFunc(w.spec.StopTimeout, func() {
		w.step.Lock()
		defer w.step.Unlock()
		if w.run != p {
			return // exited meanwhile
		}
		w.logs.mark("stop timeout after %s: killing cgroup", w.spec.StopTimeout)
		killGroup(w.spec.Group, w.logs)
	})
}

// drain is a step of a stop whose main process has exited while other
// processes of the cgroup may still run (kill mode control-group or
// process): once the cgroup is empty it ends the stop; once the grace is
// over it kills what is left and ends the stop; otherwise it looks again
// a little later. step is held.
func (w *Worker) drain() {
	pids, err := w.spec.Group.Pids()
	now := time.Now()
	if err == nil && len(pids) == 0 || !now.Before(w.graceEnd) {
		if len(pids) > 0 || err != nil {
			w.logs.mark("stop timeout after %s: killing the processes left in the cgroup %v", w.spec.StopTimeout, pids)
		}
		exit := *w.draining
		w.draining = nil
		killGroup(w.spec.Group, w.logs)
		w.setState(func(s *Status) { s.State, s.PID, s.LastExit = Stopped, 0, &exit })
		w.end()
		return
	}
	wait := min(w.drainPoll, w.graceEnd.Sub(now))
	w.drainPoll = min(2*w.drainPoll, drainPollMax)
	w.timers++
	n := w.timers
	w.timer = time.AfterFunc(wait, func() {
		w.step.Lock()
		defer w.step.Unlock()
		if w.timers != n || w.draining == nil {
			return
		}
		w.timer = nil
		w.drain()
	})
}

// end ends the worker for good: once the log copy has ended (every
// process holding the pipe gone), Done is closed and the Runtime told the
// worker has ended. step is held.
func (w *Worker) end() {
	if w.ended {
		return
	}
	w.ended = true
	closeDone := func() {
		if w.entered {
			w.spec.Runtime.leave()
		}
		close(w.done)
	}
	if w.logs == nil {
		closeDone()
		return
	}
	w.logs.onDone(closeDone)
	w.logs.release()
}

// killGroup kills every process left in cgroup g and waits until it is
// empty; it retries after an error, since a worker must not end while a
// process of its job is alive.
func killGroup(g Group, logs marker) {
	for {
		err := g.Kill(context.Background())
		if err == nil {
			return
		}
		logs.mark("kill cgroup: %v (retrying)", err)
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *Worker) fail(err error) {
	w.setState(func(s *Status) { s.State, s.PID, s.Reason = Failed, 0, err.Error() })
}

// openLog makes the job's log pipe over Log or LogFile: a new pipe, or
// the pipe of an adopted run when adopted is not nil.
func (s *Spec) openLog(adopted *os.File) (*logPipe, error) {
	var (
		sink   io.Writer = io.Discard
		closer io.Closer
	)
	switch {
	case s.LogFile.Path != "":
		f := s.LogFile.Open()
		sink, closer = f, f
		if s.Log != nil {
			sink = io.MultiWriter(f, s.Log)
		}
	case s.Log != nil:
		sink = s.Log
	}
	if adopted != nil {
		return s.Runtime.adoptLogPipe(adopted, sink, closer)
	}
	return s.Runtime.newLogPipe(sink, closer)
}
