package worker

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

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

// Task flags of field 9 of /proc/PID/stat (proc(5); include/linux/sched.h).
const (
	pfExiting    = 0x4  // PF_EXITING: in exit
	pfForkNoExec = 0x40 // PF_FORKNOEXEC: forked but did not exec; cleared by execve(2)
)

// execPoll bounds the wait for a child that is still inside execve(2)
// when syscall.ForkExec returns.
const (
	execPollStep = 50 * time.Microsecond
	execPollMax  = 5 * time.Second
)

// forkExec runs syscall.ForkExec with the reaper locked and, when the child
// has exec'd, registers ch as its owner before any reaping can happen. ch
// must be buffered (capacity ≥ 1).
//
// syscall.ForkExec reports exec errors (and failures of the child's set-up:
// credentials, working directory) itself, but a child that dies before its
// new image runs — killed by a signal the kernel sends at birth, say, or by
// a fatal error after execve's point of no return — looks to it like a
// successful exec: its status pipe just closes. So execState looks at the
// child while its zombie cannot be reaped yet; one that dies before exec
// completes is reaped here and the error says how it died.
func (r *reaper) forkExec(path string, argv []string, attr *syscall.ProcAttr, ch chan<- unix.WaitStatus) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, err
	}
	if !execState(pid) {
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

// execState reports whether pid, a child that syscall.ForkExec has just
// returned, has replaced its image (true) or is dying or dead without
// having done so (false). The status pipe closes with the child's
// close-on-exec files, which on some kernels (seen on 6.1) happens before
// execve(2) clears PF_FORKNOEXEC: a child still flagged and not exiting is
// inside execve, past its point of no return, and is watched until it
// finishes (flag cleared) or dies (PF_EXITING, or a zombie). When /proc
// cannot tell, or execve takes longer than execPollMax, it says true: the
// run's exit status then tells the rest.
func execState(pid int) bool {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return true
	}
	deadline := time.Now().Add(execPollMax)
	for {
		st, err := p.Stat()
		if err != nil {
			return true
		}
		switch {
		case st.Flags&pfForkNoExec == 0:
			return true
		case st.Flags&pfExiting != 0 || st.State == "Z" || st.State == "X":
			return false
		case time.Now().After(deadline):
			return true
		}
		time.Sleep(execPollStep)
	}
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
