package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/berthd/berth/cgroup"
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
}

var _ Group = (*cgroup.Group)(nil)

// DefaultStopTimeout is Spec.StopTimeout when it is 0: the grace between
// SIGTERM and killing the cgroup, as `docker stop` uses by default.
const DefaultStopTimeout = 10 * time.Second

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
	// Restart is the restart policy; "" means Never.
	Restart Policy
	// Backoff shapes restart delays; zero fields take DefaultBackoff's.
	Backoff Backoff
	// StopTimeout is the grace in Stop between SIGTERM and killing the
	// cgroup; 0 means DefaultStopTimeout.
	StopTimeout time.Duration
	// Log receives the job's stdout and stderr, each chunk as the job wrote
	// it, plus the agent's "berth: ..." marker lines. When LogFile is set
	// too, output goes to both (a file and the journal, say); when both are
	// unset, output is discarded.
	Log io.Writer
	// LogFile is the rotating log file used when Log is nil and Path is set.
	LogFile LogConfig
	// OnChange, when set, is called with a snapshot after every change of
	// State (from the worker's own goroutine; it must not block and must
	// not call Stop): the agent logs starts, exits, restarts and failures.
	OnChange func(Status)
	// Group is the job's cgroup (a *cgroup.Group); required. The worker
	// never deletes it: the caller does, after Stop.
	Group Group
}

// Worker supervises the runs of one job: start inside the cgroup, wait for
// the main process, kill what is left in the cgroup, then restart after a
// backoff or end, as Spec.Restart says. A run that cannot start (missing or
// non-executable command, unknown user or group, bad working directory, a
// cgroup that refuses the process, a child that dies before it execs the
// job) leaves the worker Failed with the reason and is not retried: such errors do not heal by waiting, and the supervisor
// makes a new Worker when the job's definition changes. Its methods are safe
// for concurrent use.
type Worker struct {
	spec Spec

	startOnce sync.Once
	stopOnce  sync.Once
	stopCh    chan struct{} // closed by Stop
	done      chan struct{} // closed when the supervision loop and log copier have ended

	mu     sync.Mutex
	status Status
}

// New returns a worker for spec in state Stopped; it does not start it.
func New(spec Spec) *Worker {
	if spec.StopTimeout <= 0 {
		spec.StopTimeout = DefaultStopTimeout
	}
	if spec.Restart == "" {
		spec.Restart = Never
	}
	spec.Backoff = spec.Backoff.withDefaults()
	return &Worker{
		spec:   spec,
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
		status: Status{State: Stopped},
	}
}

// Start begins the supervision loop in its own goroutine and returns at
// once; Status reports the progress. A second Start, or a Start after Stop,
// does nothing.
func (w *Worker) Start() {
	w.startOnce.Do(func() {
		select {
		case <-w.stopCh:
			close(w.done)
			return
		default:
		}
		w.setState(func(s *Status) { s.State = Starting })
		go w.run()
	})
}

// Stop ends the worker: it cancels a pending restart, sends SIGTERM to the
// main process, waits StopTimeout, then kills every process in the cgroup
// (Group.Kill) and waits until the group is empty and the log copier has
// ended. It does not delete the cgroup. It is idempotent and returns nil
// once the loop has ended, or ctx's error if ctx ends first (the loop keeps
// stopping). A worker that had already Exited or Failed keeps that state.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() { close(w.stopCh) })
	w.startOnce.Do(func() { close(w.done) }) // never started: nothing to wait for
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop worker %s: %w", w.spec.JobID, ctx.Err())
	}
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

// run is the supervision loop: start, wait, clean the cgroup, decide.
func (w *Worker) run() {
	defer close(w.done)
	if w.spec.Group == nil {
		w.fail(errors.New("no cgroup"))
		return
	}
	logs, err := w.openLog()
	if err != nil {
		w.fail(err)
		return
	}
	defer func() {
		logs.closeWriter()
		<-logs.done
	}()

	var delay time.Duration
	for {
		oomBefore, oomErr := w.spec.Group.OOMKills()
		started := time.Now()
		w.setState(func(s *Status) { s.State, s.StartedAt, s.NextRestart = Starting, started, time.Time{} })
		p, err := spawn(&w.spec, w.spec.Group, logs.w)
		if err != nil {
			logs.mark("start failed: %v", err)
			w.killGroup(logs)
			w.fail(err)
			return
		}
		// The job is already running: its first lines may come before this.
		logs.mark("started pid %d", p.pid)
		w.setState(func(s *Status) { s.State, s.PID = Running, p.pid })

		var ws unix.WaitStatus
		stopping := false
		select {
		case ws = <-p.exits:
		case <-w.stopCh:
			stopping = true
			ws = w.terminate(p, logs)
		}
		exitAt := time.Now()
		w.killGroup(logs) // a job's descendants never outlive it
		oom := false
		if ws.Signaled() && ws.Signal() == unix.SIGKILL && oomErr == nil {
			if n, err := w.spec.Group.OOMKills(); err == nil && n > oomBefore {
				oom = true
			}
		}
		exit := exitFromStatus(ws, exitAt, oom)
		logs.mark("exited pid %d: %s", p.pid, exit.Reason)

		if stopping {
			w.setState(func(s *Status) { s.State, s.PID, s.LastExit = Stopped, 0, &exit })
			return
		}
		if !w.spec.Restart.restarts(exit) {
			w.setState(func(s *Status) { s.State, s.PID, s.LastExit = Exited, 0, &exit })
			return
		}
		// The delay counts from the exit, so cleaning the cgroup is part of it.
		delay = w.spec.Backoff.next(delay, exitAt.Sub(started))
		next := exitAt.Add(delay)
		w.setState(func(s *Status) { s.State, s.PID, s.LastExit, s.NextRestart = BackingOff, 0, &exit, next })
		logs.mark("restarting in %s", delay)
		t := time.NewTimer(time.Until(next))
		select {
		case <-t.C:
		case <-w.stopCh:
			t.Stop()
			w.setState(func(s *Status) { s.State, s.NextRestart = Stopped, time.Time{} })
			return
		}
		w.setState(func(s *Status) { s.Restarts++ })
	}
}

// terminate sends SIGTERM to the main process and, if it has not exited
// after StopTimeout, kills the whole cgroup; it returns the main process's
// wait status.
func (w *Worker) terminate(p *proc, logs *logPipe) unix.WaitStatus {
	w.setState(func(s *Status) { s.State = Stopping })
	logs.mark("stopping pid %d: SIGTERM, grace %s", p.pid, w.spec.StopTimeout)
	_ = unix.Kill(p.pid, unix.SIGTERM) // ESRCH: already exited, its status is on p.exits
	t := time.NewTimer(w.spec.StopTimeout)
	defer t.Stop()
	select {
	case ws := <-p.exits:
		return ws
	case <-t.C:
	}
	logs.mark("stop timeout after %s: killing cgroup", w.spec.StopTimeout)
	w.killGroup(logs)
	return <-p.exits
}

// killGroup kills every process left in the cgroup and waits until it is
// empty; it retries after an error, since a worker must not end while a
// process of its job is alive.
func (w *Worker) killGroup(logs *logPipe) {
	for {
		err := w.spec.Group.Kill(context.Background())
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

// openLog makes the worker's log pipe over Spec.Log or Spec.LogFile.
func (w *Worker) openLog() (*logPipe, error) {
	var (
		sink   io.Writer = io.Discard
		closer io.Closer
	)
	switch {
	case w.spec.LogFile.Path != "":
		f := w.spec.LogFile.Open()
		sink, closer = f, f
		if w.spec.Log != nil {
			sink = io.MultiWriter(f, w.spec.Log)
		}
	case w.spec.Log != nil:
		sink = w.spec.Log
	}
	p, err := newLogPipe(sink, closer)
	if err != nil {
		return nil, err
	}
	p.w.Fd() // put the write end in blocking mode: jobs expect a blocking stdout
	return p, nil
}
