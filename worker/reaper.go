package worker

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// reaper is the process-wide collector of child exit statuses. It is the
// only caller of wait4 in the agent.
type reaper struct {
	// mu is held while reaping and while forking-and-registering, so that a
	// child can never be reaped before its owner is registered.
	mu      sync.Mutex
	waiters map[int]chan<- unix.WaitStatus
}

var (
	theReaper     *reaper
	theReaperOnce sync.Once
	theReaperErr  error
)

// startReaper makes the agent a child subreaper (prctl(2)
// PR_SET_CHILD_SUBREAPER) and starts the single SIGCHLD loop. It runs once
// per process; it returns the prctl error if that failed.
func startReaper() (*reaper, error) {
	theReaperOnce.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			theReaperErr = fmt.Errorf("prctl PR_SET_CHILD_SUBREAPER: %w", err)
			return
		}
		r := &reaper{waiters: make(map[int]chan<- unix.WaitStatus)}
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGCHLD)
		go func() {
			for range sigs {
				r.reapAll()
			}
		}()
		theReaper = r
	})
	return theReaper, theReaperErr
}

// reapAll reaps every exited child: wait4(-1, WNOHANG) until none is left.
// A status goes to the registered owner of the pid; orphans are dropped.
func (r *reaper) reapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- ws // buffered with room for one
		}
	}
}

// forkRegistered runs fork with the reaper locked and, when it returns a
// pid, registers ch as that pid's owner before any reaping can happen. ch
// must be buffered (capacity ≥ 1).
func (r *reaper) forkRegistered(fork func() (int, error), ch chan<- unix.WaitStatus) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, err
	}
	r.waiters[pid] = ch
	return pid, nil
}
