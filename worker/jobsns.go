package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// JobsInitCommand is the hidden command word of `berth jobs-init`, the
// init of a Runtime's jobs namespace (RunJobsInit).
const JobsInitCommand = "jobs-init"

// RuntimeOptions are what StartRuntimeWith may add to a Runtime.
type RuntimeOptions struct {
	// JobsInit, when set, is the command (argv, an absolute path first) of
	// the init of a PID namespace of the Runtime's own, in which every job
	// it launches runs: `berth jobs-init` (RunJobsInit). The kernel ends
	// every process of that namespace, however it was forked, when its
	// init dies, and the init dies with this process (see jobsNamespace).
	// nil: jobs run in this process's namespace, tied to it only by the
	// main process's parent-death signal.
	JobsInit []string
}

// jobsNamespace is the PID namespace every job of a Runtime runs in, so
// that no process of any job outlives the process that holds the Runtime
// (the lease guard): pid_namespaces(7) says that when a namespace's init
// terminates, the kernel sends SIGKILL to every other process in it, and
// that no process can be created in it afterwards.
//
// The init is forked with CLONE_NEWPID from a thread of its own, locked
// for the Runtime's life, and dies when this process does, two ways that
// need nothing of this process's but its death: its parent-death signal,
// SIGKILL, which it sets itself (RunJobsInit; Go's own Pdeathsig check
// compares getppid(2) with the parent's pid, and a parent outside the
// namespace is pid 0 inside it, so the child would kill itself), and the
// end of file on its standard input, a pipe whose only write end this
// process holds (close-on-exec: no job inherits it). A SIGKILL from the
// parent's namespace reaches a namespace's init (pid_namespaces(7)).
//
// The launcher threads join the namespace with setns(2) (CLONE_NEWPID:
// it changes the namespace of the thread's children only), so a job is
// still forked by its launcher thread, straight into its cgroup, and this
// process stays its parent and its reaper; its orphans (a double fork, a
// setsid daemon) go to the init, which reaps them. fork returns pids of
// this process's namespace, the ones /proc and cgroup.procs show here. No
// job is the namespace's init, so a job's signals behave as before; only
// its own getpid(2) is its namespace's number.
type jobsNamespace struct {
	pid  int      // the init's pid in this process's namespace
	fd   int      // /proc/<pid>/ns/pid, close-on-exec
	hold *os.File // write end of the init's standard input
	done chan struct{}

	mu     sync.Mutex
	status unix.WaitStatus // once done is closed

	quit   chan struct{} // closed by stop: the init's thread ends
	thread sync.WaitGroup
}

// startJobsNamespace forks argv as the init of a new PID namespace
// through r and opens the namespace. Errors: the pipe, the fork (EPERM
// without CAP_SYS_ADMIN: pid_namespaces(7)), or the namespace file
// cannot be opened; nothing is left running then.
func startJobsNamespace(r *reaper, argv []string) (*jobsNamespace, error) {
	if len(argv) == 0 {
		return nil, errors.New("jobs namespace: no init command")
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("jobs namespace: %w", err)
	}
	ns := &jobsNamespace{fd: -1, hold: pw, done: make(chan struct{}), quit: make(chan struct{})}
	forked := make(chan error, 1)
	ns.thread.Add(1)
	go func() {
		defer ns.thread.Done()
		// Locked for good: the init's parent-death signal fires when this
		// thread ends (prctl(2) PR_SET_PDEATHSIG), which must be when the
		// Runtime stops, or when the process dies.
		runtime.LockOSThread()
		attr := &syscall.ProcAttr{
			Files: []uintptr{pr.Fd(), 2, 2},
			Sys:   &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWPID},
		}
		pid, err := r.forkExec(argv[0], argv, attr, ns.exited)
		ns.pid = pid
		forked <- err
		if err != nil {
			return
		}
		<-ns.quit
	}()
	err = <-forked
	pr.Close()
	if err != nil {
		pw.Close()
		ns.thread.Wait()
		return nil, fmt.Errorf("jobs namespace: start its init %v: %w (a PID namespace needs CAP_SYS_ADMIN)", argv, err)
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(ns.pid)+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		ns.stop()
		return nil, fmt.Errorf("jobs namespace: open the namespace of init %d: %w", ns.pid, err)
	}
	ns.fd = fd
	return ns, nil
}

// exited is the init's wait status, from the reaper.
func (ns *jobsNamespace) exited(ws unix.WaitStatus) {
	ns.mu.Lock()
	ns.status = ws
	ns.mu.Unlock()
	close(ns.done)
}

// join makes the calling thread's children born in the namespace
// (setns(2) CLONE_NEWPID), and takes CAP_SYS_ADMIN, which the namespace
// needed, out of their bounding set (PR_CAPBSET_DROP, capabilities(7)): a
// job never gets it from the guard. The caller is a launcher thread,
// locked for good.
func (ns *jobsNamespace) join() error {
	if err := unix.Setns(ns.fd, unix.CLONE_NEWPID); err != nil {
		return fmt.Errorf("launcher thread: join the jobs' PID namespace (setns): %w", err)
	}
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_ADMIN, 0, 0, 0); err != nil {
		return fmt.Errorf("launcher thread: prctl PR_CAPBSET_DROP CAP_SYS_ADMIN (needs CAP_SETPCAP): %w", err)
	}
	return nil
}

// stop kills the init, and with it every process of the namespace, and
// waits until its thread has ended and the reaper has its status. The
// Runtime calls it after its launcher threads have ended.
func (ns *jobsNamespace) stop() {
	if ns.pid > 0 {
		_ = unix.Kill(ns.pid, unix.SIGKILL)
	}
	_ = ns.hold.Close()
	close(ns.quit)
	ns.thread.Wait()
	if ns.pid > 0 {
		<-ns.done
	}
	if ns.fd >= 0 {
		_ = unix.Close(ns.fd)
	}
}

// JobsDone is closed when the init of the Runtime's jobs namespace has
// exited (and with it every job); nil when the Runtime has none. A
// Runtime whose init is gone can start no job (fork fails with ENOMEM,
// pid_namespaces(7)): its holder should end.
func (rt *Runtime) JobsDone() <-chan struct{} {
	if rt.ns == nil {
		return nil
	}
	return rt.ns.done
}

// JobsInit is the pid, in this process's namespace, of the init of the
// Runtime's jobs namespace; 0 when it has none.
func (rt *Runtime) JobsInit() int {
	if rt.ns == nil {
		return 0
	}
	return rt.ns.pid
}

// RunJobsInit is `berth jobs-init`: the init of a jobs namespace. It sets
// its parent-death signal to SIGKILL, ignores the signals that would end
// it by default (an init gets only the signals it has a handler for from
// its own namespace, and the Go runtime has one for most: without this a
// job's `kill -TERM 1` would end every job), reaps every orphan the
// namespace's processes leave it (on SIGCHLD, wait4(2) WNOHANG), and
// returns when its standard input ends: the process that started it has
// died. The kernel then kills every process of the namespace.
func RunJobsInit() error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("jobs-init: prctl PR_SET_PDEATHSIG: %w", err)
	}
	signal.Ignore(unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2,
		unix.SIGPIPE, unix.SIGALRM, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU)
	children := make(chan os.Signal, 1)
	signal.Notify(children, unix.SIGCHLD)
	ended := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // ends at the parent's death
		close(ended)
	}()
	for {
		reapOrphans()
		select {
		case <-children:
		case <-ended:
			return nil
		}
	}
}

// reapOrphans reaps every child of the init that has exited.
func reapOrphans() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
