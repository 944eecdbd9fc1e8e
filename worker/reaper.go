package worker

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/berthd/berth/internal/kernfile"
	"golang.org/x/sys/unix"
)

// reaper is the process-wide collector of child exit statuses. It is the
// only caller of wait4 in the agent.
//
// Forks run in parallel, unlocked: a child's vfork parent (the launcher
// thread) waits until the child has exec'd, which on a busy host takes
// milliseconds while the child, born in its job's CPU cgroup, waits for a
// CPU; holding one lock across that made every start wait for every
// other. So a child may exit before its owner is registered, and the
// reaper must never reap an exited child it does not know while a fork
// that may have made it is in flight: it looks at each waitable child
// first without reaping it (waitid(2) WNOWAIT), reaps and delivers the
// known ones, and holds back at an unknown one until every fork that was
// in flight when it was seen has registered its child; still unknown then,
// it is an orphan and is reaped silently.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]func(unix.WaitStatus)
	// forkSeq numbers forks; inflight holds the numbers of the forks whose
	// children are not registered yet.
	forkSeq  uint64
	inflight map[uint64]bool
	// heldPid is an exited child the reaper holds back (0: none) until no
	// fork numbered heldSeq or lower is in flight.
	heldPid int
	heldSeq uint64

	sigs chan os.Signal // SIGCHLD
	quit chan struct{}  // closed to stop loop
	done chan struct{}  // closed when loop has returned
}

// The reaper is shared by every open Runtime: holders counts them.
var (
	reaperMu sync.Mutex
	shared   *reaper
	holders  int
)

// holdReaper returns the process-wide reaper, starting it when no Runtime
// holds it: it makes the process a child subreaper (prctl(2)
// PR_SET_CHILD_SUBREAPER) and starts the SIGCHLD loop. It returns the
// prctl error if that failed. Every successful call is paired with a
// releaseReaper.
func holdReaper() (*reaper, error) {
	reaperMu.Lock()
	defer reaperMu.Unlock()
	if shared != nil {
		holders++
		return shared, nil
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("prctl PR_SET_CHILD_SUBREAPER: %w", err)
	}
	r := &reaper{
		waiters:  make(map[int]func(unix.WaitStatus)),
		inflight: map[uint64]bool{},
		sigs:     make(chan os.Signal, 1),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.loop()
	shared, holders = r, 1
	return r, nil
}

// releaseReaper lets go of r; the last holder stops its loop, waits for
// it, reaps what has exited meanwhile and ends the subreaper role, so that
// orphans go to init again.
func releaseReaper(r *reaper) {
	reaperMu.Lock()
	defer reaperMu.Unlock()
	if holders--; holders > 0 {
		return
	}
	signal.Stop(r.sigs)
	close(r.quit)
	<-r.done
	r.reapAll()
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	shared = nil
}

// loop reaps on every SIGCHLD until releaseReaper stops it.
func (r *reaper) loop() {
	defer close(r.done)
	for {
		select {
		case <-r.sigs:
			r.reapAll()
		case <-r.quit:
			return
		}
	}
}

// reapAll reaps every exited child it may (see reaper). A status goes to
// the registered owner of the pid; orphans are dropped.
func (r *reaper) reapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reapLocked()
}

// siPidOffset is where si_pid sits in a siginfo_t (sigaction(2)): after
// si_signo, si_errno and si_code, at the alignment of the union that
// follows (8 on 64-bit Linux, 4 on 32-bit).
const siPidOffset = (3*4 + unsafe.Sizeof(uintptr(0)) - 1) / unsafe.Sizeof(uintptr(0)) * unsafe.Sizeof(uintptr(0))

// nextExited returns the pid of a child that has exited, without reaping
// it; 0 when none has.
func nextExited() int {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0 // ECHILD: no child at all
		}
		return int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), siPidOffset)))
	}
}

// reapLocked is reapAll with r.mu held.
func (r *reaper) reapLocked() {
	for {
		pid := nextExited()
		if pid <= 0 {
			return
		}
		onExit, known := r.waiters[pid]
		if !known {
			if r.heldPid != pid {
				r.heldPid, r.heldSeq = pid, r.forkSeq
			}
			if r.forkInFlightUpTo(r.heldSeq) {
				return // may be a child whose fork has not returned yet
			}
		}
		r.heldPid = 0
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if known {
			delete(r.waiters, pid)
			onExit(ws) // must not block (see forkExec)
		}
	}
}

// forkInFlightUpTo reports whether a fork numbered seq or lower has not
// registered its child yet.
func (r *reaper) forkInFlightUpTo(seq uint64) bool {
	for s := range r.inflight {
		if s <= seq {
			return true
		}
	}
	return false
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

// forkExec runs syscall.ForkExec and, when the child has exec'd,
// registers onExit as its owner; the reaper holds back any exited child it
// does not know until the registration (see reaper). onExit is called
// with the child's wait status from the reaper's goroutine, with its lock
// held: it must not block (send on a buffered channel, start a
// goroutine).
//
// syscall.ForkExec reports exec errors (and failures of the child's set-up:
// credentials, working directory) itself, but a child that dies before its
// new image runs — killed by a signal the kernel sends at birth, say, or by
// a fatal error after execve's point of no return — looks to it like a
// successful exec: its status pipe just closes. So execState looks at the
// child while its zombie cannot be reaped yet; one that dies before exec
// completes is reaped here and the error says how it died.
func (r *reaper) forkExec(path string, argv []string, attr *syscall.ProcAttr, onExit func(unix.WaitStatus)) (int, error) {
	r.mu.Lock()
	r.forkSeq++
	seq := r.forkSeq
	r.inflight[seq] = true
	r.mu.Unlock()

	pid, err := syscall.ForkExec(path, argv, attr)
	// While seq is in flight the reaper leaves pid unreaped, so execState
	// may look at it without the lock.
	execd := err == nil && execState(pid)

	r.mu.Lock()
	defer func() {
		delete(r.inflight, seq)
		if r.heldPid != 0 && !r.forkInFlightUpTo(r.heldSeq) {
			r.reapLocked() // the child held back may be ours, or an orphan
		}
		r.mu.Unlock()
	}()
	if err != nil {
		return 0, err
	}
	if !execd {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if r.heldPid == pid {
			r.heldPid = 0
		}
		msg := fmt.Sprintf("process %d died before exec: %s", pid, describeWait(ws))
		if ws.Signaled() && ws.Signal() == unix.SIGKILL {
			return 0, TransientStartError(msg) // killed from outside: a fence, or an OOM kill (Worker.passes)
		}
		return 0, errors.New(msg)
	}
	r.waiters[pid] = onExit
	if r.heldPid == pid {
		r.reapLocked() // it exited already: deliver its status
	}
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
	deadline := time.Now().Add(execPollMax)
	for {
		st, err := kernfile.ReadProcStat(pid)
		if err != nil {
			return true
		}
		switch {
		case st.Flags&pfForkNoExec == 0:
			return true
		case st.Flags&pfExiting != 0 || st.State == 'Z' || st.State == 'X':
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
