package worker

import (
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// forkRequest asks the launcher thread to fork-and-exec one process.
type forkRequest struct {
	path  string
	argv  []string
	attr  *syscall.ProcAttr
	exits chan<- unix.WaitStatus // receives the process's wait status
	reply chan forkReply
}

type forkReply struct {
	pid int
	err error
}

var (
	launchRequests = make(chan forkRequest)
	launcherOnce   sync.Once
)

// fork forks path on the launcher thread and registers exits with the
// reaper for the new pid. It returns syscall.ForkExec's error (which, when
// the image is exec'd directly, includes exec errors from the child).
func fork(path string, argv []string, attr *syscall.ProcAttr, exits chan<- unix.WaitStatus) (int, error) {
	if err := startLauncher(); err != nil {
		return 0, err
	}
	req := forkRequest{path: path, argv: argv, attr: attr, exits: exits, reply: make(chan forkReply, 1)}
	launchRequests <- req
	rep := <-req.reply
	return rep.pid, rep.err
}

// startLauncher starts the process-wide reaper and launcher goroutines once.
func startLauncher() error {
	if _, err := startReaper(); err != nil {
		return err
	}
	launcherOnce.Do(func() { go launcher() })
	return nil
}

// launcher is the one goroutine that forks workers. It locks itself to its
// OS thread and never returns, so that thread lives as long as the agent:
// Pdeathsig is delivered when the forking thread exits (prctl(2)
// PR_SET_PDEATHSIG; golang/go#27505), not when the agent does.
func launcher() {
	runtime.LockOSThread() // never unlocked: the thread must not be reused or retired
	r := theReaper
	for req := range launchRequests {
		pid, err := r.forkRegistered(func() (int, error) {
			return syscall.ForkExec(req.path, req.argv, req.attr)
		}, req.exits)
		req.reply <- forkReply{pid: pid, err: err}
	}
}
