package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/boottime"
	"golang.org/x/sys/unix"
)

// CgroupLeaf is the guard's own cgroup below the cgroup root, in every
// hierarchy: beside <root>/agent, never under <root>/jobs or <root>/groups
// (nothing of berth's counts against a job), and a leaf, as cgroup v2's
// no-internal-process rule requires of a cgroup with processes
// (cgroup-v2.rst "No Internal Process Constraint").
const CgroupLeaf = "guard"

// lockPath is the file a running guard holds flock(2) on, so that one
// guard at most serves a data_dir.
func lockPath(dataDir string) string { return filepath.Join(dataDir, "guard.lock") }

// ErrRunning is returned by Serve when another guard already serves the
// data_dir (it holds <data_dir>/guard.lock).
var ErrRunning = errors.New("another guard serves this data_dir")

// ServeOptions configure the guard process.
type ServeOptions struct {
	// DataDir is the agent's data_dir ([agent] data_dir): the socket and
	// the lock file live there.
	DataDir string
	// CgroupRoot is the agent's cgroup_root, as its configuration names it
	// ("" for the cgroup systemd delegated, cgroup.Open).
	CgroupRoot string
	// Log receives the guard's log; nil: slog.Default().
	Log *slog.Logger
	// Ready, when set, is called once the socket listens.
	Ready func()
	// JobsInit, when set, is the command of the init of the PID namespace
	// every job runs in (`berth jobs-init`: worker.RunJobsInit), so that
	// the kernel kills every process of every job when the guard dies,
	// whatever killed it (docs/live-restart.md). nil: jobs run in the
	// guard's namespace (the in-process tests), their main processes tied
	// to it by their parent-death signal only.
	JobsInit []string
}

// killRetry is the pause between attempts to kill a job cgroup that
// resisted (a process in uninterruptible sleep).
const killRetry = time.Second

// helloGrace is how long a guard that never had an agent waits for one
// (the agent that started it says hello within milliseconds, unless it
// died meanwhile).
const helloGrace = 5 * time.Second

// maxWait caps one wait for the deadline: the timer runs on the
// monotonic clock, which stops while the system is suspended, and
// CLOCK_BOOTTIME is read again after every wake.
const maxWait = time.Second

// Serve runs the guard until it is released, or has killed every job
// after a deadline, or ctx ends (a test's stop: nothing is killed). It
// opens the hierarchy of opts.CgroupRoot, moves this process into
// <root>/guard in every hierarchy, listens on SocketPath, and then:
//
//   - the newest connection that said hello is the agent (an older one is
//     told opReplaced and closed): its deadlines replace the one held
//     (opDeadline), its runs are started and listed, and exits go to it;
//   - opRelease: Serve returns nil without killing;
//   - the deadline passes, with or without an agent connected (a hung
//     one stops sending): every process of every cgroup under <root>/jobs
//     and <root>/groups is killed and those cgroups removed
//     (cgroup.Hierarchy.Cleanup: cgroup.kill on v2, freeze-kill-thaw on
//     v1), retried until done, and Serve returns nil;
//   - the agent disconnects before sending any deadline, or no agent says
//     hello within helloGrace of the start: the same kill at once (no
//     lease is known that would let a job run).
//
// Errors: ErrRunning when another guard holds the data_dir; the time
// namespace's offset cannot be read (internal/boottime); the hierarchy
// cannot be opened or has no <root>/jobs (the agent prepares it first);
// the leaf cannot be made or entered; the socket cannot be made.
func Serve(ctx context.Context, opts ServeOptions) error {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	lock, err := os.OpenFile(lockPath(opts.DataDir), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("guard: lock %s: %w", lockPath(opts.DataDir), err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("guard: %s: %w", lockPath(opts.DataDir), ErrRunning)
		}
		return fmt.Errorf("guard: lock %s: %w", lockPath(opts.DataDir), err)
	}
	if _, err := boottime.Offset(); err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	h, err := cgroup.Open(opts.CgroupRoot)
	if err != nil {
		return fmt.Errorf("guard: open cgroup root %q: %w", opts.CgroupRoot, err)
	}
	h.SetLogger(log)
	// The agent prepares the root before it starts a guard: a guard
	// whose agent died and whose root was removed meanwhile must not make
	// it again.
	if _, err := h.Load(cgroup.JobsDir); err != nil {
		return fmt.Errorf("guard: cgroup root %q is not prepared: %w", opts.CgroupRoot, err)
	}
	// One guard's deadline kills every job under the root: never beside
	// a guard of another data_dir.
	if err := CheckRoot(h, opts.DataDir); err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	if err := enterLeaf(h); err != nil {
		return err
	}
	// After the move: the launcher threads start from the guard's leaf.
	rs, err := newRuns(log, h, opts.JobsInit)
	if err != nil {
		return err
	}
	defer rs.close()
	sock := SocketPath(opts.DataDir)
	// Sockets left by a guard that died, of this release or the previous
	// one (whose runs socket an agent would take for a guard of that
	// release): we hold the lock, so none of them listens.
	_ = os.Remove(sock)
	_ = os.Remove(legacyRunsSocketPath(opts.DataDir))
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("guard: listen on %s: %w", sock, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("guard: chmod %s: %w", sock, err)
	}
	s := &server{log: log, h: h, runs: rs, ln: ln, open: map[*msgConn]bool{}, msgs: make(chan ctlMsg), quit: make(chan struct{})}
	s.wg.Add(1)
	go s.accept()
	defer s.close()
	log.Info("guard listening", "socket", sock, "protocol", Version, "cgroup_root", h.Root(), "pid", os.Getpid(),
		"jobs_init", rs.rt.JobsInit())
	if opts.Ready != nil {
		opts.Ready()
	}
	return s.run(ctx)
}

// leafTimeout bounds the removal of a leaf an earlier guard left (its
// last processes may still be exiting).
const leafTimeout = 10 * time.Second

// enterLeaf makes <root>/guard in every hierarchy, anew, and moves this
// process (every thread: cgroup.procs) into it.
//
// Anew: a leaf an earlier guard left is removed first, so that the guard
// forks from a cgroup that was never killed. An agent ends a hung guard
// by writing cgroup.kill in its leaf, and the kernel compares the kill
// count (kill_seq) of the forking task's cgroup with that of the cgroup a
// CLONE_INTO_CGROUP child is born in: when they differ the child is
// SIGKILLed before it can exec (kernel/cgroup/cgroup.c, cgroup_css_set_fork
// and cgroup_post_fork, Linux 6.14 to at least 6.18), so every job start
// of a guard in a killed leaf would die. A fresh cgroup's count is 0, as
// is every fresh run leaf's (cgroup.Group.ForkInside).
//
// Errors: the earlier leaf cannot be removed within leafTimeout (a
// process of it does not exit), or the leaf cannot be made or entered.
func enterLeaf(h *cgroup.Hierarchy) error {
	if old, err := h.Load(CgroupLeaf); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), leafTimeout)
		err = old.Kill(ctx)
		if err == nil {
			err = old.Delete(ctx)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("guard: remove the leaf an earlier guard left: %w", err)
		}
	} else if !errors.Is(err, cgroup.ErrNotExist) {
		return fmt.Errorf("guard: %w", err)
	}
	g, err := h.New(CgroupLeaf, nil)
	if err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	p := g.Placement()
	files := p.ProcsFiles
	if p.UnifiedDir != "" {
		files = append(files, filepath.Join(p.UnifiedDir, "cgroup.procs"))
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	for _, f := range files {
		if err := os.WriteFile(f, pid, 0); err != nil {
			return fmt.Errorf("guard: enter %s: %w", f, err)
		}
	}
	return nil
}

// server is one guard's state: run owns the deadline and which
// connection is the agent's; each connection's serveConn reads it.
type server struct {
	log  *slog.Logger
	h    *cgroup.Hierarchy
	runs *runs
	ln   *net.UnixListener
	msgs chan ctlMsg
	quit chan struct{}
	wg   sync.WaitGroup // accept and every serveConn

	mu     sync.Mutex
	open   map[*msgConn]bool // every connection, closed by close
	closed bool
}

// ctlMsg is a hello, deadline or release for run, with the channel that
// takes its answer (serveConn sends it: run never waits for an agent that
// does not read), or the end (err set) of a connection that said hello.
type ctlMsg struct {
	mc    *msgConn
	m     runMsg
	reply chan runMsg // room for one; an answer without Op is not sent
	err   error
}

// accept hands every connection of a root peer to a serveConn of its own.
func (s *server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return // closed by close
		}
		if uid, err := peerUID(c); err != nil || uid != 0 {
			s.log.Warn("guard: refused a connection not from root", "uid", uid, "error", err)
			c.Close()
			continue
		}
		// A write waits long for an agent that does not read (a burst of
		// exits, a starved agent); one that fails closes the connection,
		// and the agent then lists the runs again over a new one.
		mc := &msgConn{c: c, timeout: guardSendTimeout}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.open[mc] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(mc)
	}
}

// peerUID is the uid of the process at the other end of c (SO_PEERCRED,
// unix(7)).
func peerUID(c *net.UnixConn) (int, error) {
	cred, err := peerCred(c)
	if err != nil {
		return -1, err
	}
	return int(cred.Uid), nil
}

// peerCred is the credentials of the process at the other end of c
// (SO_PEERCRED, unix(7): for a connected socket, the process that called
// listen(2) on the other end).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	return cred, nil
}

// serveConn reads one connection until it ends: a hello first, then the
// agent's deadlines and release (to run) and its runs (to runs). A
// connection that is not the agent's (it never said hello, or a newer one
// did) may not start, forget or list runs.
func (s *server) serveConn(mc *msgConn) {
	defer s.wg.Done()
	defer func() {
		s.runs.disconnected(mc)
		mc.c.Close()
		s.mu.Lock()
		delete(s.open, mc)
		s.mu.Unlock()
	}()
	buf, oob := newRecvBuffers()
	hello := false
	for {
		// Counted before it leaves the socket, and again once handled:
		// so drain knows of every message the agent sent (pending).
		err := mc.await()
		mc.received.Add(1)
		var m runMsg
		var files []int
		if err == nil {
			m, files, err = mc.recv(buf, oob)
		}
		if err != nil {
			if hello {
				s.tell(ctlMsg{mc: mc, err: err})
			}
			return
		}
		more := s.serveMsg(mc, m, files, &hello)
		mc.handled.Add(1)
		if !more {
			return
		}
	}
}

// serveMsg handles one message m of connection mc with its descriptors
// (owned here); hello says whether mc has said hello. It returns false
// when the connection is to be closed.
func (s *server) serveMsg(mc *msgConn, m runMsg, files []int, hello *bool) bool {
	switch m.Op {
	case opHello, opDeadline, opRelease:
		closeAll(files)
		if m.Op == opHello && m.Version != Version {
			s.log.Warn("guard: refused a hello of another protocol version", "version", m.Version, "want", Version, "peer_pid", m.PID)
			_ = mc.send(runMsg{Op: opHello, Seq: m.Seq, Version: Version, PID: os.Getpid(),
				Error: fmt.Sprintf("protocol version %d, this guard speaks %d", m.Version, Version)})
			return false
		}
		if m.Op != opHello && !*hello {
			s.log.Warn("guard: a message before hello; closing the connection", "op", m.Op)
			return false
		}
		reply := make(chan runMsg, 1)
		if !s.tell(ctlMsg{mc: mc, m: m, reply: reply}) {
			return false
		}
		var a runMsg
		select {
		case a = <-reply:
		case <-s.quit:
			return false
		}
		if a.Op == "" {
			return true // sent by run, or refused (run closed the connection)
		}
		// From its hello on, run counts this connection as the
		// agent's, and must hear of its end.
		*hello = *hello || m.Op == opHello
		if err := mc.send(a); err != nil {
			s.log.Warn("guard: answer the agent", "op", a.Op, "error", err)
		}
	case opSpawn, opForget, opList:
		if !*hello || !s.runs.isAgent(mc) {
			closeAll(files)
			s.log.Warn("guard: runs message from a connection that is not the agent's; closing it", "op", m.Op)
			return false
		}
		s.runs.serve(mc, m, files)
	default:
		closeAll(files)
		s.log.Warn("guard: unexpected message; closing the connection", "op", m.Op)
		return false
	}
	return true
}

// tell hands cm to run; false when the guard is closing.
func (s *server) tell(cm ctlMsg) bool {
	select {
	case s.msgs <- cm:
		return true
	case <-s.quit:
		return false
	}
}

// close stops the goroutines and waits for them.
func (s *server) close() {
	close(s.quit)
	s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for mc := range s.open {
		mc.c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// agentState is what run holds: which connection is the agent's, and
// the deadline.
type agentState struct {
	agent    *msgConn
	agentPID int
	deadline int64     // boottime.Now ns; 0: none received
	lonely   time.Time // until the first hello
}

func (s *server) run(ctx context.Context) error {
	st := agentState{lonely: time.Now().Add(helloGrace)}
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	for {
		wait := maxWait
		if st.deadline != 0 {
			wait = min(maxWait, time.Duration(st.deadline-boottime.Now()))
		}
		timer.Reset(max(0, wait))
		select {
		case <-ctx.Done():
			return nil
		case <-s.runs.rt.JobsDone():
			// Every job died with it (pid_namespaces(7)), and none can
			// start again: the agent starts a new guard.
			return fmt.Errorf("guard: the init of the jobs' PID namespace (pid %d) exited: every job was killed", s.runs.rt.JobsInit())
		case cm := <-s.msgs:
			if exit, err := s.handle(&st, cm); exit {
				return err
			}
		case <-timer.C:
			if !st.lonely.IsZero() && time.Now().After(st.lonely) {
				s.log.Warn("guard: no agent connected since the start: killing every job now", "waited", helloGrace)
				return s.killAll()
			}
			if now := boottime.Now(); st.deadline != 0 && now >= st.deadline {
				// A guard that was stopped (SIGSTOP, a paused host) wakes
				// with its timer due and the agent's newer deadlines
				// still queued on its socket: they are read first.
				old := st.deadline
				if exit, err := s.drain(&st); exit {
					return err
				}
				if now = boottime.Now(); now < st.deadline {
					s.log.Warn("guard: the deadline had passed, but a newer one the agent sent was waiting to be read: holding it",
						"late", time.Duration(now-old), "deadline_in", time.Duration(st.deadline-now).Round(time.Millisecond))
					continue
				}
				s.log.Error("guard: the fencing deadline passed without a renewal from the agent: killing every job",
					"agent_connected", st.agent != nil, "agent_pid", st.agentPID, "late", time.Duration(now-st.deadline))
				return s.killAll()
			}
		}
	}
}

// drainMax bounds drain: an agent that keeps sending cannot hold off a
// kill whose deadline has passed.
const drainMax = time.Second

// drainPoll is how often drain looks again at the agent's socket.
const drainPoll = time.Millisecond

// drain handles every message the agent's connection sent that the guard
// has not handled yet (msgConn.pending), within drainMax; exit and err
// as handle's.
func (s *server) drain(st *agentState) (bool, error) {
	limit := time.After(drainMax)
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for st.agent != nil && st.agent.pending() {
		select {
		case cm := <-s.msgs:
			if exit, err := s.handle(st, cm); exit {
				return true, err
			}
		case <-tick.C:
		case <-limit:
			return false, nil
		}
	}
	return false, nil
}

// handle acts on one message of a connection (or its end); exit is true
// when the guard is done (released: err nil; or every job killed,
// killAll's error).
func (s *server) handle(st *agentState, cm ctlMsg) (exit bool, err error) {
	if cm.err != nil {
		if cm.mc != st.agent {
			return false, nil // a replaced connection's end
		}
		s.log.Warn("guard: the agent disconnected without release", "agent_pid", st.agentPID, "error", cm.err,
			"deadline_in", time.Duration(st.deadline-boottime.Now()).Round(time.Millisecond))
		st.agent = nil
		if st.deadline == 0 {
			s.log.Warn("guard: no deadline was ever received: killing every job now")
			return true, s.killAll()
		}
		return false, nil
	}
	if cm.m.Op == opHello {
		if st.agent != nil && st.agent != cm.mc {
			s.log.Info("guard: a new agent connected; the previous connection is closed", "previous_pid", st.agentPID)
		}
		s.runs.setAgent(cm.mc)
		st.agent, st.agentPID, st.lonely = cm.mc, cm.m.PID, time.Time{}
		s.log.Info("guard: agent connected", "agent_pid", st.agentPID, "runs_held", s.runs.count())
		cm.reply <- runMsg{Op: opHello, Seq: cm.m.Seq, Version: Version, PID: os.Getpid()}
		return false, nil
	}
	if cm.mc != st.agent {
		// A replaced connection's last words end it.
		cm.mc.c.Close()
		cm.reply <- runMsg{}
		return false, nil
	}
	switch cm.m.Op {
	case opDeadline:
		st.deadline = cm.m.Deadline
		cm.reply <- runMsg{Op: opAck, Seq: cm.m.Seq, Deadline: st.deadline}
	case opRelease:
		// Answered here: the guard exits next, and nothing waits to be
		// killed.
		if err := st.agent.send(runMsg{Op: opAck, Seq: cm.m.Seq}); err != nil {
			s.log.Warn("guard: answer the release", "error", err)
		}
		cm.reply <- runMsg{}
		s.log.Info("guard: released by the agent; exiting without killing", "agent_pid", st.agentPID)
		return true, nil
	}
	return false, nil
}

// killAll kills every process of every cgroup under <root>/jobs and
// <root>/groups and removes those cgroups, trying again every killRetry
// until it succeeds: the guard does not leave while a job's process may
// still run. Each subtree is killed whole first (cgroup.kill of
// <root>/jobs kills every job at once; v1's freezer freezes the whole
// subtree), so that every job dies at the deadline and not one cgroup
// after another (1,000 jobs take about 2 s to kill and remove one by
// one); then each job's cgroup is removed and logged
// (cgroup.Hierarchy.Cleanup).
func (s *server) killAll() error {
	for {
		var errs []error
		for _, sub := range cgroup.Subtrees() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if g, err := s.h.Load(sub); err == nil {
				errs = append(errs, g.Kill(ctx))
			} else if !errors.Is(err, cgroup.ErrNotExist) {
				errs = append(errs, err)
			}
			cancel()
		}
		s.log.Info("guard: killed every process under jobs and groups", "errors", errors.Join(errs...))
		for _, sub := range cgroup.Subtrees() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			errs = append(errs, s.h.Cleanup(ctx, sub))
			cancel()
		}
		err := errors.Join(errs...)
		if err == nil {
			s.log.Info("guard: every job's cgroup is empty and removed; exiting")
			return nil
		}
		s.log.Error("guard: kill every job: trying again", "error", err, "in", killRetry)
		time.Sleep(killRetry)
	}
}
