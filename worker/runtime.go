package worker

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// Runtime is the machinery the workers of one agent share: the launcher
// threads that start their jobs (two pools: one for jobs that run as the
// agent's user, one of confined threads for jobs with a user of their own,
// started by the first such job), the log readers that copy their output,
// and a hold on the process-wide reaper. Whoever starts the agent makes it
// with StartRuntime, passes it to every worker (Spec.Runtime) and closes it
// after the last worker has ended; Close stops every goroutine and thread
// it started and waits for them.
//
// Several Runtimes may be open in one process (tests run several agents):
// each has its own threads and readers, and they share the reaper, since
// wait4(-1) collects every child of the process; the reaper stops when the
// last Runtime closes.
type Runtime struct {
	reaper   *reaper
	plain    *pool // jobs that run as the agent's user
	confined *pool // jobs that run as a user of their own (a Credential)
	muxes    []*logMux
	ns       *jobsNamespace // nil: jobs run in this process's PID namespace

	mu      sync.Mutex
	nextMux int  // round robin over muxes
	live    int  // workers started on this Runtime that have not ended
	closed  bool // Close has begun: no worker may start

	starts chan struct{} // one slot per start under way (startSlots)
	// adopts holds one slot per adoption's own work under way
	// (adoptSlots).
	adopts chan struct{}
}

// startSlots bounds the starts under way at once on a Runtime: from the
// write end of the job's log pipe opened to the fork's return. A start
// holds that write end, and with a lease guard the guard holds both pipe
// ends it was sent, until the fork is done; unbounded, an agent that makes
// cgroups faster than the guard forks (thousands of jobs on a busy host)
// piled up spawns until the guard ran out of descriptors (EMFILE, seen at
// 10,000 jobs: BENCHMARKS.md). Four per launcher thread keep every
// launcher busy.
func startSlots() int { return 4 * launcherCount() }

// adoptSlots bounds the adoptions' own work under way at once (the log
// pipe read on, the OOM kill count read, the mark: Worker.adopt) to one per
// CPU: that work follows the report of a hand-over (Spec.AdoptAfter), and
// thousands of adoptions' reads at once left the agent's API answering
// half a second late at 10,000 jobs.
func adoptSlots() int { return runtime.GOMAXPROCS(0) }

// adoptSlot is startSlot for an adoption's own work (adoptSlots).
func (rt *Runtime) adoptSlot(stop <-chan struct{}) (release func()) {
	return slot(rt.adopts, stop)
}

// startSlot waits for a start slot, or until stop is closed, which wins
// when both are ready. It returns the func that gives the slot back (safe
// to call more than once), or nil when stop closed first.
func (rt *Runtime) startSlot(stop <-chan struct{}) (release func()) {
	return slot(rt.starts, stop)
}

// slot waits for a slot of slots, or until stop is closed, which wins
// when both are ready, and returns the func that gives it back (safe to
// call more than once), or nil when stop closed first.
func slot(slots chan struct{}, stop <-chan struct{}) (release func()) {
	select {
	case <-stop:
		return nil
	default:
	}
	select {
	case slots <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-slots }) }
	case <-stop:
		return nil
	}
}

// ErrRuntimeClosed is the reason of a worker started on a Runtime that has
// been closed.
var ErrRuntimeClosed = errors.New("worker runtime closed")

// StartRuntime makes this process a child subreaper (prctl(2)
// PR_SET_CHILD_SUBREAPER), holds the process-wide reaper (starting it if no
// other Runtime holds it), and starts the log readers and the launcher
// threads of jobs that run as the agent's user; a stop signal the process
// ignores is caught instead, so that jobs get it at its default
// (unignoreStopSignals). The agent calls it at
// start-up, so that a failure shows before any job is touched. It returns
// the prctl(2) error when the process cannot become a subreaper, the
// epoll_create1(2) or eventfd(2) error when a log reader cannot start, or
// the error of a launcher thread that cannot find its own cgroups; nothing
// is left running then.
func StartRuntime() (*Runtime, error) { return StartRuntimeWith(RuntimeOptions{}) }

// StartRuntimeWith is StartRuntime with opts: with opts.JobsInit, every
// job runs in a PID namespace of the Runtime's own, whose init it starts
// first (jobsNamespace), so that the kernel ends every process of every
// job when this process dies. It returns StartRuntime's errors, and
// startJobsNamespace's.
func StartRuntimeWith(opts RuntimeOptions) (*Runtime, error) {
	unignoreStopSignals()
	r, err := holdReaper()
	if err != nil {
		return nil, err
	}
	rt := &Runtime{reaper: r, plain: newPool(false), confined: newPool(true), starts: make(chan struct{}, startSlots()),
		adopts: make(chan struct{}, adoptSlots())}
	if opts.JobsInit != nil {
		if rt.ns, err = startJobsNamespace(r, opts.JobsInit); err != nil {
			releaseReaper(r)
			return nil, err
		}
		rt.plain.ns, rt.confined.ns = rt.ns, rt.ns
	}
	if err := rt.startLogMuxes(); err != nil {
		rt.stop()
		return nil, err
	}
	if err := rt.plain.start(r); err != nil {
		rt.stop()
		return nil, err
	}
	return rt, nil
}

// Close stops the launcher threads and log readers and lets go of the
// reaper (which stops, and the process stops being a subreaper, when no
// other Runtime holds it), and waits until every goroutine it started has
// returned. It must be called after every worker started on it has ended
// (Worker.Done): a launcher thread must outlive the processes it forked,
// whose parent-death signal fires when it exits (prctl(2)
// PR_SET_PDEATHSIG). While a worker has not ended, Close stops nothing and
// returns an error saying how many are left; a later Close may succeed. A
// second Close returns nil.
func (rt *Runtime) Close() error {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil
	}
	if rt.live > 0 {
		n := rt.live
		rt.mu.Unlock()
		return fmt.Errorf("close worker runtime: %d workers have not ended", n)
	}
	rt.closed = true
	rt.mu.Unlock()
	rt.stop()
	return nil
}

// stop stops whatever StartRuntime started and waits for it.
func (rt *Runtime) stop() {
	rt.plain.stop()
	rt.confined.stop()
	if rt.ns != nil {
		rt.ns.stop()
	}
	for _, m := range rt.muxes {
		m.stop()
	}
	releaseReaper(rt.reaper)
}

// enter counts a worker that starts; it fails once Close has begun.
func (rt *Runtime) enter() error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return ErrRuntimeClosed
	}
	rt.live++
	return nil
}

// leave counts a worker that has ended.
func (rt *Runtime) leave() {
	rt.mu.Lock()
	rt.live--
	rt.mu.Unlock()
}
