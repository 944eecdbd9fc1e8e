package worker

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/prometheus/procfs"
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

// pfForkNoExec is the kernel's PF_FORKNOEXEC task flag ("forked but didn't
// exec", include/linux/sched.h), field 9 of /proc/PID/stat (proc(5)): set
// at fork, cleared when execve(2) has replaced the image.
const pfForkNoExec = 0x40

// forkExec runs syscall.ForkExec with the reaper locked and, when the child
// has exec'd, registers ch as its owner before any reaping can happen. ch
// must be buffered (capacity ≥ 1).
//
// syscall.ForkExec reports exec errors (and failures of the child's set-up:
// credentials, working directory) itself, but a child killed before exec —
// by a signal the kernel sends at birth, say — looks to it like a
// successful exec (its status pipe just closes). So the child's
// PF_FORKNOEXEC flag is checked while its zombie cannot yet be reaped: set
// means it never ran the job's image; it is then reaped here and the error
// names how it died.
func (r *reaper) forkExec(path string, argv []string, attr *syscall.ProcAttr, ch chan<- unix.WaitStatus) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, err
	}
	if !execed(pid) {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		return 0, fmt.Errorf("process %d died before exec: %s", pid, describeWait(ws))
	}
	r.waiters[pid] = ch
	return pid, nil
}

// execed reports whether pid, a child that syscall.ForkExec has just
// returned, went through execve(2). When /proc cannot tell, it says yes:
// the run's exit status then tells the rest.
func execed(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return true
	}
	st, err := p.Stat()
	if err != nil {
		return true
	}
	return st.Flags&pfForkNoExec == 0
}

func describeWait(ws unix.WaitStatus) string {
	switch {
	case ws.Signaled():
		return "killed by " + unix.SignalName(ws.Signal())
	case ws.Exited():
		return fmt.Sprintf("exited %d", ws.ExitStatus())
	}
	return fmt.Sprintf("wait status %#x", uint32(ws))
}
