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
}

var (
	// launchers start the jobs that run as the agent's user.
	launchers = &pool{requests: make(chan launchRequest)}
	// confinedLaunchers start the jobs that run as a user of their own
	// (a Credential): every child they fork has no_new_privs and an empty
	// capability bounding set. Started when the first such job starts.
	confinedLaunchers = &pool{requests: make(chan launchRequest), confined: true}
)

// launcherCount is the number of launcher threads, and so the number of
// starts that run at once: four per P, at most 16. Forks run in parallel
// too (neither the Go runtime nor the reaper serialises them), and each
// waits for its child's exec; the crossings into and out of the jobs'
// cgroups wait on the kernel's cgroup_mutex more than they run: with one
// thread per P, a thousand starts on a busy 2-core host took 18 s, with
// four per P 3–9 s (BENCHMARKS.md).
func launcherCount() int { return max(2, min(4*runtime.GOMAXPROCS(0), 16)) }

// launch starts path on one of the launcher threads, inside g, and
// registers onExit with the reaper for the new pid (see reaper.forkExec).
// It returns once the child has exec'd the image, or with the error that
// kept it from doing so.
// A start with a Credential (a job with `user`) runs on a confined launcher
// thread (confineThread), so the job can never gain a privilege: it fails
// when such a thread cannot be made.
func launch(g Group, path string, argv []string, attr *syscall.ProcAttr, onExit func(unix.WaitStatus)) (int, error) {
	p := launchers
	if attr.Sys != nil && attr.Sys.Credential != nil {
		p = confinedLaunchers
	}
	if err := p.start(); err != nil {
		return 0, err
	}
	req := launchRequest{group: g, path: path, argv: argv, attr: attr, onExit: onExit, reply: make(chan launchReply, 1)}
	p.requests <- req
	rep := <-req.reply
	return rep.pid, rep.err
}

// startLauncher starts the process-wide reaper and the launcher threads
// once; it returns the error of the first that could not start (every
// later call returns it too).
func startLauncher() error { return launchers.start() }

// start starts the process-wide reaper, the log readers and p's threads
// once; it returns the error of the first that could not start (every
// later call returns it too).
func (p *pool) start() error {
	if _, err := startReaper(); err != nil {
		return err
	}
	if err := startLogMuxes(); err != nil {
		return err
	}
	p.once.Do(func() {
		n := launcherCount()
		ready := make(chan error, n)
		for range n {
			go launcher(ready, p)
		}
		for range n {
			if err := <-ready; err != nil && p.err == nil {
				p.err = err
			}
		}
	})
	return p.err
}

// launcher is one launcher thread: a goroutine locked to its OS thread for
// the life of the agent. The lock is never undone and the goroutine never
// returns once it has forked, because Pdeathsig is delivered when the
// forking thread exits, not when the agent does (prctl(2)
// PR_SET_PDEATHSIG); and a locked thread is also one the Go
// runtime never clones new threads from, which matters while it sits in a
// job's cgroups (see cgroup.Home), and while it is confined (confineThread:
// a pool of confined threads starts the jobs that run as a user).
func launcher(ready chan<- error, p *pool) {
	runtime.LockOSThread() // never unlocked
	var err error
	if p.confined {
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
	for req := range p.requests {
		pid, err := launchHere(home, req)
		req.reply <- launchReply{pid: pid, err: err}
		if errors.Is(err, cgroup.ErrThreadStranded) {
			// This thread is stuck in a job's cgroup: it must fork nothing
			// more, and must not end (its children's Pdeathsig).
			select {}
		}
	}
}

// launchHere runs req on the calling launcher thread.
func launchHere(home *cgroup.Home, req launchRequest) (int, error) {
	fork := func(cgroupFD int) (int, error) {
		attr := *req.attr
		if cgroupFD >= 0 {
			sys := *attr.Sys
			sys.UseCgroupFD, sys.CgroupFD = true, cgroupFD
			attr.Sys = &sys
		}
		return theReaper.forkExec(req.path, req.argv, &attr, req.onExit)
	}
	if req.group == nil {
		return fork(-1)
	}
	return req.group.ForkInside(home, fork)
}
