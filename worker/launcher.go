package worker

import (
	"errors"
	"runtime"
	"sync"
	"syscall"

	"github.com/berthd/berth/cgroup"
	"golang.org/x/sys/unix"
)

// launchRequest asks a launcher thread to start one process.
type launchRequest struct {
	group  Group // nil: no cgroup (the fork+exec floor of the benchmarks)
	path   string
	argv   []string
	attr   *syscall.ProcAttr
	onExit func(unix.WaitStatus) // told the process's wait status; must not block
	reply  chan launchReply
}

type launchReply struct {
	pid int
	err error
}

// pool is a set of launcher threads serving one channel of requests.
type pool struct {
	requests chan launchRequest
	once     sync.Once
	err      error
	// confined threads have given up every privilege a child could gain
	// (confineThread) before they fork anything.
	confined bool
	// ns, when set, is the PID namespace the threads' children are born
	// in (jobsNamespace.join).
	ns      *jobsNamespace
	reaper  *reaper
	quit    chan struct{} // closed by stop: the threads end
	threads sync.WaitGroup
}

func newPool(confined bool) *pool {
	return &pool{requests: make(chan launchRequest), confined: confined, quit: make(chan struct{})}
}

// launcherCount is the number of launcher threads, and so the number of
// starts that run at once: four per P, at most 16. Forks run in parallel
// too (neither the Go runtime nor the reaper serialises them), and each
// waits for its child's exec; the crossings into and out of the jobs'
// cgroups wait on the kernel's cgroup_mutex more than they run: with one
// thread per P, a thousand starts on a busy 2-core host took 18 s, with
// four per P 3–9 s (BENCHMARKS.md).
func launcherCount() int { return max(2, min(4*runtime.GOMAXPROCS(0), 16)) }

// launch starts path on one of rt's launcher threads, inside g, and
// registers onExit with the reaper for the new pid (see reaper.forkExec).
// It returns once the child has exec'd the image, or with the error that
// kept it from doing so.
// A start with a Credential (a job with `user`) runs on a confined launcher
// thread (confineThread), so the job can never gain a privilege: it fails
// when such a thread cannot be made.
func (rt *Runtime) launch(g Group, path string, argv []string, attr *syscall.ProcAttr, onExit func(unix.WaitStatus)) (int, error) {
	p := rt.plain
	if attr.Sys != nil && attr.Sys.Credential != nil {
		p = rt.confined
	}
	if err := p.start(rt.reaper); err != nil {
		return 0, err
	}
	req := launchRequest{group: g, path: path, argv: argv, attr: attr, onExit: onExit, reply: make(chan launchReply, 1)}
	select {
	case p.requests <- req:
	case <-p.quit:
		return 0, ErrRuntimeClosed
	}
	rep := <-req.reply
	return rep.pid, rep.err
}

// start starts p's threads, which fork through r, once; it returns the
// error of the first that could not start (every later call returns it
// too).
func (p *pool) start(r *reaper) error {
	p.once.Do(func() {
		p.reaper = r
		n := launcherCount()
		ready := make(chan error, n)
		p.threads.Add(n)
		for range n {
			go func() {
				defer p.threads.Done()
				p.launcher(ready)
			}()
		}
		for range n {
			if err := <-ready; err != nil && p.err == nil {
				p.err = err
			}
		}
	})
	return p.err
}

// stop ends p's threads and waits for them. No launch may be under way or
// come later.
func (p *pool) stop() {
	p.once.Do(func() { p.err = ErrRuntimeClosed }) // never started: never will
	close(p.quit)
	p.threads.Wait()
}

// launcher is one launcher thread: a goroutine locked to its OS thread
// until its Runtime closes. The lock is never undone, so the thread ends
// with the goroutine, and the goroutine does not return while a process
// it forked may live, because Pdeathsig is delivered when the forking
// thread exits, not when the agent does (prctl(2) PR_SET_PDEATHSIG); and a
// locked thread is also one the Go runtime never clones new threads from,
// which matters while it sits in a job's cgroups (see cgroup.Home), and
// while it is confined (confineThread: a pool of confined threads starts
// the jobs that run as a user).
func (p *pool) launcher(ready chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	var err error
	if p.ns != nil {
		err = p.ns.join()
	}
	if err == nil && p.confined {
		err = confineThread()
	}
	var home *cgroup.Home
	if err == nil {
		home, err = cgroup.ThreadHome()
	}
	ready <- err
	if err != nil {
		// Has forked nothing: its thread may end. The goroutine returns
		// still locked, so the runtime ends the thread rather than reuse
		// one that may be half confined.
		return
	}
	for {
		select {
		case <-p.quit:
			return
		case req := <-p.requests:
			pid, err := launchHere(p.reaper, home, req)
			req.reply <- launchReply{pid: pid, err: err}
			if errors.Is(err, cgroup.ErrThreadStranded) {
				// This thread is stuck in a job's cgroup: it must fork
				// nothing more, and must not end while its children
				// live (their Pdeathsig).
				<-p.quit
				return
			}
		}
	}
}

// launchHere runs req on the calling launcher thread, forking through r.
func launchHere(r *reaper, home *cgroup.Home, req launchRequest) (int, error) {
	fork := func(cgroupFD int) (int, error) {
		attr := *req.attr
		if cgroupFD >= 0 {
			sys := *attr.Sys
			sys.UseCgroupFD, sys.CgroupFD = true, cgroupFD
			attr.Sys = &sys
		}
		return r.forkExec(req.path, req.argv, &attr, req.onExit)
	}
	if req.group == nil {
		return fork(-1)
	}
	return req.group.ForkInside(home, fork)
}
