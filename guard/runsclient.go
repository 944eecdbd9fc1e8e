package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/berthd/berth/internal/boottime"
	"github.com/berthd/berth/internal/kernfile"
	"github.com/berthd/berth/worker"
	"golang.org/x/sys/unix"
)

// lostStatus is the wait status a run is given when the connection to
// the guard that started it ends: the guard is gone, and its children
// with it (their parent-death signal is SIGKILL).
const lostStatus = unix.WaitStatus(unix.SIGKILL)

// runsClient is the agent's side of its one connection to the guard: the
// live link, made again when it breaks, with the deadlines and the runs
// it carries. Client embeds it; its Spawn, Adopt and Forget are the
// worker.Spawner the agent's workers start through.
type runsClient struct {
	opts Options
	log  *slog.Logger
	kick func() // has the deadline sender send the newest deadline (a new link)
	// beforeRelist, when set (tests), runs when the live link has ended,
	// before the client connects again to list the runs.
	beforeRelist func()

	dialMu sync.Mutex // one link made at a time; never held with mu

	mu        sync.Mutex
	live      *link
	had       bool // a link was live before: the next one lists the runs first
	links     map[*link]bool
	closed    bool
	releasing bool
	seq       uint64
	onExit    map[string]func(unix.WaitStatus) // by run ID
	pending   map[string]unix.WaitStatus       // exits nobody waits for yet
	// owned holds the run IDs the guard told of (spawned, held, exited),
	// kept across a relist while the guard still holds them; lost those
	// the guard no longer holds (relist) that no one waited for yet:
	// their wait gets lostStatus at once.
	owned map[string]bool
	lost  map[string]bool
	// silentSince is when the guard first failed to answer in time in
	// the current run of failures (zero: it answers), silent how many
	// messages went unanswered since; see hung.
	silentSince time.Time
	silent      int

	wg sync.WaitGroup // every link's read loop
}

// link is one connection to a guard. On a guard of this release it is
// one socket, mc; on one of the previous release (legacy.go) mc is its
// runs socket and v1 its deadline socket.
type link struct {
	mc  *msgConn
	v1  *net.UnixConn
	pid int // the guard's, from its hello
	// start is the guard's start time (/proc/PID/stat field 22, in its
	// clock ticks; 0: not read), which tells it from a later process
	// given its pid (gone).
	start uint64
	// offset is the boottime offset of the guard's time namespace, ns
	// (boottime.OffsetOf): a guard of the previous release reads
	// deadlines and start times on its own clock, not the initial
	// namespace's.
	offset int64
	done   chan struct{} // closed when the read loop has ended

	// Under runsClient.mu:
	waiting  map[uint64]chan answer // answers by Seq
	listing  *listing               // during a list
	ended    bool
	replaced bool // the guard took a newer connection for the agent's
	// acked is the newest deadline (boottime.Now ns) the guard
	// acknowledged on this link; 0: none yet. The guard holds it or a
	// later one sent on this link, and kills every job once its own
	// passes (past).
	acked int64
}

// answer is the guard's answer to one request, or the link's end (err).
type answer struct {
	m   runMsg
	err error
}

// listing routes opHeld and opHeldBatch messages to one list call; done
// is closed when the call returns, so that the read loop never blocks on
// a list no one reads.
type listing struct {
	ch   chan heldMsg
	done chan struct{}
}

// heldMsg is the runs of one opHeld or opHeldBatch with their
// descriptors (logrs[i] is held[i]'s), or the list's end (done).
type heldMsg struct {
	held  []heldEntry
	logrs []int
	done  bool
	err   error
}

// HeldRun is a run an earlier agent started, as the guard holds it.
type HeldRun struct {
	worker.Run
	// Exited is true when the run's main process has ended (Status).
	Exited bool
	Status unix.WaitStatus
	// Logr is the read end of the run's log pipe.
	Logr *os.File
	// tickSlack: the agent's or the guard's time namespace offset is not
	// a whole start time tick, so StartTicks, converted to the initial
	// namespace on either side, may differ by one (boottime.ShiftTicks).
	tickSlack bool
}

var _ worker.Spawner = (*Client)(nil)

// spawnTimeout bounds the wait for the guard's answer to a spawn: a
// start that takes longer (a guard stuck under the cgroup mutex) fails,
// and the worker reports it.
const spawnTimeout = 30 * time.Second

// errHung marks a guard that accepted a connection but did not answer.
var errHung = errors.New("the lease guard does not answer")

// errNoAnswer is a request the guard did not answer in time.
var errNoAnswer = errors.New("no answer in time")

// errClientClosed is a connection cut short by closeRuns.
var errClientClosed = errors.New("lease guard client closed")

// liveLink returns the live link (nil: none), or errClientClosed.
func (rc *runsClient) liveLink() (*link, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.closed {
		return nil, errClientClosed
	}
	return rc.live, nil
}

// pid is the pid of the guard of the live link, 0 while there is none.
func (rc *runsClient) pid() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.live == nil {
		return 0
	}
	return rc.live.pid
}

// attach returns the live link, or makes one (connect; start: a guard is
// started when none listens, and one that is hung ended). A link made
// after an earlier one ended lists the runs first (install).
func (rc *runsClient) attach(ctx context.Context, start bool) (*link, error) {
	if l, err := rc.liveLink(); l != nil || err != nil {
		return l, err
	}
	rc.dialMu.Lock()
	defer rc.dialMu.Unlock()
	if l, err := rc.liveLink(); l != nil || err != nil { // made meanwhile
		return l, err
	}
	l, err := rc.connect(ctx, start)
	if err != nil {
		return nil, err
	}
	if err := rc.install(ctx, l); err != nil {
		return nil, err
	}
	return l, nil
}

// connect dials the guard; with start, it starts one when none listens,
// and ends one that accepts but does not answer when hung says so.
func (rc *runsClient) connect(ctx context.Context, start bool) (*link, error) {
	l, err := rc.dial(ctx)
	if err == nil || !start || errors.Is(err, errClientClosed) || errors.Is(err, ErrForeign) {
		return l, err
	}
	if errors.Is(err, errHung) {
		// A guard that accepts but does not answer (stopped, stuck) would
		// keep this agent from starting, and could kill its jobs at a
		// deadline it held when it runs again: end it. One that runs and
		// is only late (busy forking on a loaded host) is given
		// hungAfter: ending it would kill every job.
		if !rc.hung() {
			return nil, fmt.Errorf("%w; it runs, so it is given %s before it is ended", err, hungAfter)
		}
		if kerr := rc.endHung(ctx, err); kerr != nil {
			return nil, kerr
		}
	}
	if err := spawn(ctx, rc.opts); err != nil {
		return nil, err
	}
	return rc.dial(ctx)
}

// dial connects to the guard that listens and exchanges hellos. A guard
// of the previous release is told by its runs socket, on which something
// listens (a guard of this release removes it): it is dialled on both of
// its sockets (legacy.go). Errors: no guard listens; its peer is not
// root; it serves another cgroup_root (ErrForeign, checkServes, before
// any hello: that guard keeps its agent); it does not answer its hello within answerTimeout (errHung); it
// speaks another protocol version; errClientClosed.
func (rc *runsClient) dial(ctx context.Context) (*link, error) {
	var d net.Dialer
	if nc, err := d.DialContext(ctx, "unixpacket", legacyRunsSocketPath(rc.opts.DataDir)); err == nil {
		return rc.dialLegacy(nc.(*net.UnixConn))
	}
	path := SocketPath(rc.opts.DataDir)
	nc, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, fmt.Errorf("connect to the lease guard: %w", err)
	}
	c := nc.(*net.UnixConn)
	cred, err := peerCred(c)
	if err != nil || cred.Uid != 0 {
		c.Close()
		return nil, fmt.Errorf("connect to the lease guard %s: its peer is not root (%+v, %v)", path, cred, err)
	}
	// Before the hello: a guard of another cgroup_root is not taken over.
	if err := rc.opts.checkServes(int(cred.Pid)); err != nil {
		c.Close()
		return nil, err
	}
	l, err := rc.open(&link{mc: &msgConn{c: c}})
	if err != nil {
		return nil, err
	}
	a, err := rc.call(l, runMsg{Op: opHello, Version: Version, PID: os.Getpid()}, answerTimeout)
	if err == nil && (a.Error != "" || a.Version != Version) {
		l.mc.c.Close()
		return nil, fmt.Errorf("connect to the lease guard %s: it speaks protocol %d, this agent %d: %s", path, a.Version, Version, a.Error)
	}
	if err != nil {
		l.mc.c.Close()
		return nil, fmt.Errorf("connect to the lease guard %s: %w: %w", path, errHung, err)
	}
	off, err := boottime.OffsetOf(a.PID)
	if err != nil {
		l.mc.c.Close()
		return nil, fmt.Errorf("the lease guard (pid %d): %w", a.PID, err)
	}
	rc.mu.Lock()
	l.pid, l.offset, l.start = a.PID, off, startOf(a.PID)
	rc.mu.Unlock()
	return l, nil
}

// startOf is the start time of process pid (/proc/PID/stat field 22),
// 0 when it cannot be read.
func startOf(pid int) uint64 {
	st, err := kernfile.ReadProcStat(pid)
	if err != nil {
		return 0
	}
	return st.StartTicks
}

// gone reports whether the guard of l has exited: its pid names no
// process, a zombie, or one started at another time. Every process it
// started went with it (each run lives in its guard's PID namespace,
// whose init has SIGKILL as its parent-death signal: pid_namespaces(7),
// prctl(2)); the worker still kills the job's cgroup before a retry.
func (l *link) gone() bool {
	st, err := kernfile.ReadProcStat(l.pid)
	if err != nil {
		return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH)
	}
	return st.State == 'Z' || st.State == 'X' || l.start != 0 && st.StartTicks != l.start
}

// past reports whether the newest deadline the guard of l acknowledged
// has passed: the guard then kills every job and exits, unless a later
// deadline the agent sent reaches it first (serve.go, drain). A link
// that acknowledged none is not past (the guard holds no deadline of
// this agent's yet).
func (rc *runsClient) past(l *link) bool {
	rc.mu.Lock()
	acked := l.acked
	rc.mu.Unlock()
	return acked != 0 && boottime.Now() >= acked
}

// dialLegacy makes a link to a guard of the previous release, whose runs
// socket runs is connected: it dials its deadline socket and reads the
// boottime offset of its time namespace.
func (rc *runsClient) dialLegacy(runs *net.UnixConn) (*link, error) {
	path := legacyRunsSocketPath(rc.opts.DataDir)
	cred, err := peerCred(runs)
	if err != nil || cred.Uid != 0 {
		runs.Close()
		return nil, fmt.Errorf("connect to %s: its peer is not root (%+v, %v)", path, cred, err)
	}
	if err := rc.opts.checkServes(int(cred.Pid)); err != nil {
		runs.Close()
		return nil, err
	}
	v1, pid, err := dialV1(SocketPath(rc.opts.DataDir))
	if err != nil {
		runs.Close()
		return nil, err
	}
	off, err := boottime.OffsetOf(pid)
	if err != nil {
		runs.Close()
		v1.Close()
		return nil, fmt.Errorf("the lease guard of the previous release (pid %d): %w", pid, err)
	}
	return rc.open(&link{mc: &msgConn{c: runs}, v1: v1, pid: pid, offset: off, start: startOf(pid)})
}

// open registers l and starts its read loop. Errors: errClientClosed (l
// is closed).
func (rc *runsClient) open(l *link) (*link, error) {
	l.done = make(chan struct{})
	l.waiting = map[uint64]chan answer{}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.closed {
		l.mc.c.Close()
		if l.v1 != nil {
			l.v1.Close()
		}
		return nil, errClientClosed
	}
	if rc.links == nil {
		rc.links = map[*link]bool{}
	}
	rc.links[l] = true
	rc.wg.Add(1)
	go rc.read(l)
	return l, nil
}

// call sends m (with fds) on l and waits within timeout for the answer
// with its Seq. Errors: the send fails (a connection broken by it is
// closed), the link ends first, or errNoAnswer.
func (rc *runsClient) call(l *link, m runMsg, timeout time.Duration, fds ...int) (runMsg, error) {
	ch := make(chan answer, 1)
	rc.mu.Lock()
	if l.ended {
		rc.mu.Unlock()
		return runMsg{}, fmt.Errorf("%s: the lease guard's connection ended", m.Op)
	}
	rc.seq++
	m.Seq = rc.seq
	l.waiting[m.Seq] = ch
	rc.mu.Unlock()
	forget := func() {
		rc.mu.Lock()
		delete(l.waiting, m.Seq)
		rc.mu.Unlock()
	}
	if err := l.mc.send(m, fds...); err != nil {
		forget()
		var le localError
		if !errors.As(err, &le) {
			l.mc.c.Close() // broken: the read loop reports what ran through it
		}
		return runMsg{}, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a := <-ch: // the read loop answers every waiter, also when the link ends
		return a.m, a.err
	case <-t.C:
		forget()
		return runMsg{}, fmt.Errorf("%s: %w", m.Op, errNoAnswer)
	}
}

// deadlineOn hands the guard of l deadline d (boottime.Now ns) and waits
// for its acknowledgement. Errors: as call's (errNoAnswer: it did not
// answer within answerTimeout).
func (rc *runsClient) deadlineOn(l *link, d int64) error {
	var err error
	if l.v1 != nil {
		_, err = exchangeV1(l.v1, message{kind: kindDeadline, value: uint64(d + l.offset)}, kindAck, true)
	} else {
		_, err = rc.call(l, runMsg{Op: opDeadline, Deadline: d}, answerTimeout)
	}
	if err == nil {
		rc.mu.Lock()
		l.acked = d
		rc.mu.Unlock()
	}
	return err
}

// releaseOn sends the release on l and waits for its acknowledgement.
func (rc *runsClient) releaseOn(l *link) error {
	if l.v1 != nil {
		_, err := exchangeV1(l.v1, message{kind: kindRelease}, kindAck, true)
		return err
	}
	_, err := rc.call(l, runMsg{Op: opRelease}, answerTimeout)
	return err
}

// forward hands the guard the newest deadline (newest is read again
// after a reconnection, which may take seconds) and returns it: on the
// live link, else on a new one (attach, which starts a guard if none
// listens). A guard that does not answer is ended only when hung says
// so; a link that broke is closed and made again.
func (rc *runsClient) forward(ctx context.Context, newest func() int64) (int64, error) {
	l, err := rc.liveLink()
	if err != nil {
		return 0, err
	}
	if l != nil {
		d := newest()
		err := rc.deadlineOn(l, d)
		if err == nil {
			rc.heard()
			return d, nil
		}
		if errors.Is(err, errNoAnswer) {
			if !rc.hung() {
				return 0, fmt.Errorf("the lease guard does not answer: %w; it runs, so it is given %s before it is ended", err, hungAfter)
			}
			if kerr := rc.endHung(ctx, err); kerr != nil {
				return 0, kerr
			}
		}
		// Its read loop ends it (and starts a relist) once it is closed.
		l.mc.c.Close()
		<-l.done
	}
	if l, err = rc.attach(ctx, true); err != nil {
		return 0, err
	}
	d := newest()
	if err := rc.deadlineOn(l, d); err != nil {
		return 0, err
	}
	rc.heard()
	return d, nil
}

// heard notes an answer: the guard is not silent.
func (rc *runsClient) heard() {
	rc.mu.Lock()
	rc.silentSince, rc.silent = time.Time{}, 0
	rc.mu.Unlock()
}

// read routes the guard's messages on l until it ends; then, if l was
// the live link and the guard did not replace it with a newer agent's,
// it has the runs listed again over a new one (reattach). It never
// blocks on a send to the guard, so that exits keep coming however busy
// the agent is.
func (rc *runsClient) read(l *link) {
	defer rc.wg.Done()
	buf, oob := newRecvBuffers()
	var err error
	for {
		var m runMsg
		var fds []int
		m, fds, err = l.mc.recv(buf, oob)
		if err != nil {
			break
		}
		switch m.Op {
		case opSpawned, opHello, opAck:
			closeAll(fds)
			rc.mu.Lock()
			ch := l.waiting[m.Seq]
			delete(l.waiting, m.Seq)
			if m.Op == opSpawned && m.Run != nil && m.Error == "" {
				rc.own(m.Run.ID)
			}
			rc.mu.Unlock()
			if ch != nil {
				ch <- answer{m: m} // room for one
			}
		case opReplaced:
			closeAll(fds)
			rc.mu.Lock()
			l.replaced = true
			rc.mu.Unlock()
		case opExited:
			closeAll(fds)
			if m.Run != nil {
				rc.exit(m.Run.ID, unix.WaitStatus(m.Status))
			}
		case opHeld, opHeldBatch, opListed:
			h := heldMsg{done: m.Op == opListed, logrs: fds}
			switch {
			case h.done:
				closeAll(fds)
				h.logrs = nil
			case m.Op == opHeld && m.Run != nil:
				h.held = []heldEntry{{Run: *m.Run, Exited: m.Exited, Status: m.Status}}
			case m.Op == opHeldBatch:
				h.held = m.Held
			}
			rc.mu.Lock()
			ls := l.listing
			for _, e := range h.held {
				rc.own(e.Run.ID)
			}
			rc.mu.Unlock()
			if ls == nil || !h.done && (len(h.held) == 0 || len(fds) != len(h.held)) {
				closeAll(fds)
				continue
			}
			select {
			case ls.ch <- h:
			case <-ls.done:
				closeAll(fds)
			}
		default:
			closeAll(fds)
		}
	}
	rc.mu.Lock()
	live := rc.live == l
	if live {
		rc.live = nil
	}
	l.ended = true
	delete(rc.links, l)
	waiting, ls, replaced := l.waiting, l.listing, l.replaced
	l.waiting = nil
	closing := rc.closed || rc.releasing
	rc.mu.Unlock()
	l.mc.c.Close()
	if l.v1 != nil {
		l.v1.Close()
	}
	for _, ch := range waiting {
		ch <- answer{m: runMsg{Error: fmt.Sprintf("the lease guard's connection ended: %v", err)}, err: fmt.Errorf("the lease guard's connection ended: %w", err)}
	}
	if ls != nil {
		select {
		case ls.ch <- heldMsg{err: fmt.Errorf("the lease guard's connection ended: %w", err)}:
		case <-ls.done:
		}
	}
	close(l.done)
	if closing || !live {
		return
	}
	if replaced {
		// Another agent's connection took the guard over: taking it back
		// at once would take it from that one, and so on. This client
		// connects again (listing the runs) when it next needs the guard.
		rc.logger().Warn("another agent connected to the lease guard; this agent connects again at its next renewal or start", "guard_pid", l.pid)
		return
	}
	rc.reattach(err)
}

// own records that the guard holds run id (under mu).
func (rc *runsClient) own(id string) {
	if rc.owned == nil {
		rc.owned = map[string]bool{}
	}
	rc.owned[id] = true
}

// relistTries is how many connections a relist tries before it counts
// the runs lost.
const relistTries = 3

// reattach follows the end of the live link (cause): the guard may live
// on (it closed a connection whose writes stalled for guardSendTimeout,
// or the connection broke), so the client connects again, without
// starting a guard, and lists the runs the guard holds (install). When
// no guard answers (it is gone, and the runs' main processes with it)
// every run is lost: its wait gets lostStatus.
func (rc *runsClient) reattach(cause error) {
	if rc.beforeRelist != nil {
		rc.beforeRelist()
	}
	rc.dialMu.Lock()
	defer rc.dialMu.Unlock()
	if l, err := rc.liveLink(); l != nil || err != nil { // made meanwhile, or closing
		return
	}
	rc.mu.Lock()
	n := len(rc.owned)
	rc.mu.Unlock()
	rc.logger().Warn("the connection to the lease guard ended; listing its runs again", "cause", cause, "runs", n)
	var err error
	for try := 1; try <= relistTries; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		var l *link
		if l, err = rc.connect(ctx, false); err == nil {
			err = rc.install(ctx, l)
		}
		cancel()
		if err == nil || errors.Is(err, errClientClosed) {
			return
		}
	}
	rc.mu.Lock()
	var calls []func()
	lost := 0
	for id := range rc.owned {
		lost++
		calls = append(calls, rc.lose(id)...)
	}
	rc.mu.Unlock()
	for _, f := range calls {
		f()
	}
	rc.logger().Error("the lease guard is gone: its runs are lost and their jobs handled by their restart policy", "error", err, "lost", lost)
}

// lose counts run id lost (under mu): its wait, or the one to come, gets
// lostStatus; the call to make after mu is returned.
func (rc *runsClient) lose(id string) []func() {
	delete(rc.owned, id)
	if f := rc.onExit[id]; f != nil {
		delete(rc.onExit, id)
		return []func(){func() { f(lostStatus) }}
	}
	if _, done := rc.pending[id]; !done {
		if rc.lost == nil {
			rc.lost = map[string]bool{}
		}
		rc.lost[id] = true
	}
	return nil
}

// install makes l, a link just dialled, the live one. The first link is
// live at once. A later one follows the end of another, whose runs this
// client knew of: the runs are listed over l, which is not live yet, so
// no spawn goes through it before the list is done and every running run
// the client does not know of is a stray. A run this client knew of that
// the guard still holds is re-attached: its exit, if it came meanwhile,
// is delivered with its real status, else it is waited for on l (a
// running run's process is checked as adoption does, HeldRun.Verify). A
// run the guard no longer holds is lost: its wait gets lostStatus. A
// running stray (a spawn whose answer the broken connection lost; the
// worker has failed that start) is killed and forgotten; an ended one is
// forgotten (its forget was lost with the connection). Errors: the list
// fails (l is closed), or errClientClosed.
func (rc *runsClient) install(ctx context.Context, l *link) error {
	rc.mu.Lock()
	first := !rc.had
	if first {
		rc.live, rc.had = l, true
	}
	rc.mu.Unlock()
	if first {
		return nil
	}
	// The runs known before the list, which marks every run it lists.
	rc.mu.Lock()
	known := make(map[string]bool, len(rc.owned))
	for id := range rc.owned {
		known[id] = true
	}
	rc.mu.Unlock()
	held, err := rc.list(ctx, l)
	rc.mu.Lock()
	closed, ended := rc.closed, l.ended
	rc.mu.Unlock()
	switch {
	case closed:
		err = errClientClosed
	case err == nil && ended:
		err = errors.New("the lease guard's connection ended during the list")
	}
	if err != nil {
		for _, h := range held {
			h.Logr.Close()
		}
		l.mc.c.Close()
		if errors.Is(err, errClientClosed) {
			return err
		}
		return fmt.Errorf("list the lease guard's runs again: %w", err)
	}
	byID := make(map[string]HeldRun, len(held))
	for _, h := range held {
		h.Logr.Close() // the worker reads the pipe through its own read end
		byID[h.ID] = h
	}
	// Checks that read /proc run before the lock. A run whose process is
	// gone was reaped by the guard after the list: its exit comes on l.
	bad, reaped := map[string]error{}, map[string]bool{}
	for id, h := range byID {
		if h.Exited || !known[id] {
			continue
		}
		if verr := h.Verify(); verr != nil {
			if unix.Kill(h.PID, 0) == unix.ESRCH {
				reaped[id] = true
			} else {
				bad[id] = verr
			}
		}
	}
	var calls []func()
	lost, reattached, delivered := 0, 0, 0
	rc.mu.Lock()
	if rc.closed || l.ended {
		rc.mu.Unlock()
		l.mc.c.Close()
		if rc.closed {
			return errClientClosed
		}
		return errors.New("list the lease guard's runs again: the connection ended after the list")
	}
	for id := range known {
		h, ok := byID[id]
		switch {
		case !ok:
			lost++
			calls = append(calls, rc.lose(id)...)
		case bad[id] != nil:
			rc.logger().Warn("a run the lease guard holds fails its identity check after the reconnection: lost", "run", id, "error", bad[id])
			lost++
			calls = append(calls, rc.lose(id)...)
		case reaped[id]:
			delivered++ // its exit is on its way on l
		case h.Exited:
			delivered++
			if f := rc.onExit[id]; f != nil {
				delete(rc.onExit, id)
				st := h.Status
				calls = append(calls, func() { f(st) })
			} else if _, done := rc.pending[id]; !done {
				if rc.pending == nil {
					rc.pending = map[string]unix.WaitStatus{}
				}
				rc.pending[id] = h.Status
			}
		default:
			reattached++
		}
	}
	var stray []HeldRun
	for id, h := range byID {
		if !known[id] {
			stray = append(stray, h)
			delete(rc.owned, id) // marked by the list; nobody waits for it
			delete(rc.pending, id)
		}
	}
	rc.live = l
	rc.mu.Unlock()
	for _, f := range calls {
		f()
	}
	for _, h := range stray {
		if !h.Exited && h.Verify() == nil {
			_ = unix.Kill(h.PID, unix.SIGKILL) // the guard's unreaped child: its pid names it
			rc.logger().Warn("killed a run whose start was lost with the connection", "job_id", h.JobID, "run", h.ID, "pid", h.PID)
		}
		_ = l.mc.send(runMsg{Op: opForget, Run: &worker.Run{ID: h.ID}})
	}
	rc.logger().Info("runs re-attached after the connection to the lease guard ended", "guard_pid", l.pid, "running", reattached, "exited", delivered, "lost", lost)
	if rc.kick != nil {
		rc.kick() // the guard may be a new one, which holds no deadline yet
	}
	return nil
}

func (rc *runsClient) logger() *slog.Logger {
	if rc.log == nil {
		return slog.Default()
	}
	return rc.log
}

// exit hands run id's status to whoever waits for it, or keeps it.
func (rc *runsClient) exit(id string, ws unix.WaitStatus) {
	rc.mu.Lock()
	rc.own(id)
	f, ok := rc.onExit[id]
	if ok {
		delete(rc.onExit, id)
	} else {
		if rc.pending == nil {
			rc.pending = map[string]unix.WaitStatus{}
		}
		rc.pending[id] = ws
	}
	rc.mu.Unlock()
	if ok {
		f(ws)
	}
}

// wait registers f for run id's exit: a status already come (or
// lostStatus when the link that told of the run has ended and no guard
// holds it) is delivered at once.
func (rc *runsClient) wait(id string, f func(unix.WaitStatus)) {
	rc.mu.Lock()
	ws, done := rc.pending[id]
	switch {
	case done:
		delete(rc.pending, id)
	case rc.lost[id] || !rc.owned[id] && rc.live == nil:
		delete(rc.lost, id)
		ws, done = lostStatus, true
	default:
		if rc.onExit == nil {
			rc.onExit = map[string]func(unix.WaitStatus){}
		}
		rc.onExit[id] = f
	}
	rc.mu.Unlock()
	if done {
		f(ws)
	}
}

// Spawn has the guard start x for r (worker.Spawner): the guard becomes
// the run's parent, so the run outlives this agent until the lease
// guard's deadline. It starts through a guard that is not past its
// deadline (startLink). Errors: the guard cannot be reached or started,
// or does not answer within spawnTimeout ("lease guard"), or its
// launcher's (the program, the cgroup); worker.ErrStartInterrupted when
// the guard was lost during the start, or was past its deadline
// throughout (lostDuring): nothing of the start lives on, and the worker
// tries it again on the next guard.
func (c *Client) Spawn(x *worker.Exec, r worker.Run, logw *os.File, logr int, onExit func(unix.WaitStatus)) (worker.Run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	rc := &c.runs
	l, err := rc.startLink(ctx)
	if err != nil {
		return worker.Run{}, err
	}
	a, err := rc.call(l, runMsg{Op: opSpawn, Exec: x, Run: &r}, spawnTimeout, int(logw.Fd()), logr)
	if err != nil { // no answer: the connection ended (its Error tells so too), or errNoAnswer
		broke := !errors.Is(err, errNoAnswer)
		if !broke {
			err = fmt.Errorf("no answer within %s", spawnTimeout)
		}
		if how := rc.lostDuring(l, broke); how != "" {
			rc.logger().Warn("a start was cut short by the loss of the lease guard; it is tried again on the next guard",
				"job_id", r.JobID, "guard_pid", l.pid, "how", how, "error", err)
			return worker.Run{}, worker.InterruptedStartError(fmt.Sprintf("start through the lease guard: %v; the guard (pid %d) %s", err, l.pid, how))
		}
		return worker.Run{}, fmt.Errorf("start through the lease guard: %w", err)
	}
	if a.Error != "" || a.Run == nil {
		msg := strings.TrimPrefix(a.Error, "start ")
		if a.Transient {
			return worker.Run{}, worker.TransientStartError(msg)
		}
		return worker.Run{}, errors.New(msg)
	}
	rc.wait(a.Run.ID, onExit)
	return l.run(*a.Run), nil
}

// startLink returns the link a start goes through: the live one, or a
// new one (attach: a guard being replaced, a hung one ended and a new one
// starting, is looked for again), whose guard is not past its deadline.
// A guard past its deadline is about to kill every job and exit
// (serve.go), so a start through it would be killed or cut short: it is
// waited for until it acknowledges a later deadline, or is gone and a new
// guard is started. Errors: ctx ends first (worker.ErrStartInterrupted
// when the guard was past its deadline: nothing was sent); attach's;
// errClientClosed.
func (rc *runsClient) startLink(ctx context.Context) (*link, error) {
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		l, err := rc.attach(ctx, true)
		if errors.Is(err, errClientClosed) {
			return nil, fmt.Errorf("start through the lease guard: %w", err)
		}
		past := err == nil && rc.past(l)
		if err == nil && !past {
			return l, nil
		}
		if past {
			err = fmt.Errorf("the lease guard (pid %d) is past its fencing deadline: it kills every job and exits", l.pid)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			if past {
				return nil, worker.InterruptedStartError(fmt.Sprintf("start through the lease guard: %v (%v); tried again on the next guard", err, ctx.Err()))
			}
			return nil, fmt.Errorf("start through the lease guard: %w (%w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// goneWait bounds how long lostDuring waits for a guard to be gone.
const goneWait = readyTimeout

// lostDuring tells how the guard of l was lost during a start that got
// no answer (broke: the connection ended or its send failed; else
// errNoAnswer), "" when it was not: it lives and is not past its
// deadline, so the start may run in it. A guard whose connection ended,
// or that is past its deadline, is waited for up to goneWait to be gone;
// one past its deadline still there then is ended (endHung): it kills
// every job and exits anyway.
func (rc *runsClient) lostDuring(l *link, broke bool) string {
	rc.mu.Lock()
	ended := l.ended || broke
	rc.mu.Unlock()
	past := rc.past(l)
	if !ended && !past {
		if l.gone() {
			return "exited during the start"
		}
		return ""
	}
	if rc.waitGone(l) {
		return "exited during the start"
	}
	if !past {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), goneWait)
	defer cancel()
	if err := rc.endHung(ctx, fmt.Errorf("past its fencing deadline, it did not answer a start")); err != nil {
		rc.logger().Warn("end the lease guard past its deadline", "guard_pid", l.pid, "error", err)
	}
	if rc.waitGone(l) {
		return "was past its fencing deadline and was ended"
	}
	return ""
}

// waitGone waits up to goneWait for the guard of l to be gone (gone).
func (rc *runsClient) waitGone(l *link) bool {
	end := time.Now().Add(goneWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		if l.gone() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(wait)
	}
}

// run is r as the guard of l told it, its start time in ticks of the
// initial time namespace: a guard of the previous release read it in its
// own.
func (l *link) run(r worker.Run) worker.Run {
	if l.v1 != nil {
		r.StartTicks = boottime.ShiftTicks(r.StartTicks, l.offset)
	}
	return r
}

// tickSlack reports whether start times converted by the guard of l and
// by this process may differ by a tick (HeldRun.tickSlack).
func (l *link) tickSlack() bool {
	own, _ := boottime.Offset() // read at Start
	return !boottime.WholeTicks(own) || !boottime.WholeTicks(l.offset)
}

// Adopt has onExit told the status of run, which an earlier agent started
// (worker.Spawner).
func (c *Client) Adopt(run worker.Run, onExit func(unix.WaitStatus)) {
	c.runs.wait(run.ID, onExit)
}

// Forget tells the guard to drop run's record and log pipe
// (worker.Spawner): its exit has been handled, or it is not adopted.
func (c *Client) Forget(run worker.Run) {
	rc := &c.runs
	rc.mu.Lock()
	delete(rc.pending, run.ID)
	delete(rc.lost, run.ID)
	delete(rc.owned, run.ID)
	l := rc.live
	rc.mu.Unlock()
	if l != nil {
		_ = l.mc.send(runMsg{Op: opForget, Run: &worker.Run{ID: run.ID}})
	}
}

// Held asks the guard for the runs it holds (started for an earlier
// agent, or this one), each with its log pipe's read end, owned by the
// caller. The exit statuses of runs that ended are kept for Adopt.
// Errors: the guard cannot be reached, or the connection ends.
func (c *Client) Held(ctx context.Context) ([]HeldRun, error) {
	rc := &c.runs
	l, err := rc.attach(ctx, true)
	if err != nil {
		return nil, err
	}
	held, err := rc.list(ctx, l)
	if err != nil {
		return nil, err
	}
	rc.mu.Lock()
	for _, run := range held {
		if run.Exited {
			if rc.pending == nil {
				rc.pending = map[string]unix.WaitStatus{}
			}
			rc.pending[run.ID] = run.Status
		}
	}
	rc.mu.Unlock()
	return held, nil
}

// list asks the guard over l for the runs it holds and collects them
// (the read loop of l routes them here). Errors: ctx ends, or the link
// does.
func (rc *runsClient) list(ctx context.Context, l *link) ([]HeldRun, error) {
	ls := &listing{ch: make(chan heldMsg, 16), done: make(chan struct{})}
	rc.mu.Lock()
	if l.ended {
		rc.mu.Unlock()
		return nil, errors.New("list the lease guard's runs: the connection ended")
	}
	l.listing = ls
	rc.mu.Unlock()
	var out []HeldRun
	defer func() {
		rc.mu.Lock()
		if l.listing == ls {
			l.listing = nil
		}
		rc.mu.Unlock()
		close(ls.done)
		for {
			select {
			case h := <-ls.ch: // sent before done was closed
				closeAll(h.logrs)
			default:
				return
			}
		}
	}()
	if err := l.mc.send(runMsg{Op: opList, Batch: maxHeldBatch}); err != nil {
		return nil, err
	}
	for {
		var h heldMsg
		select {
		case h = <-ls.ch:
		case <-ctx.Done():
			for _, r := range out {
				r.Logr.Close()
			}
			return nil, fmt.Errorf("list the lease guard's runs: %w", ctx.Err())
		}
		if h.err != nil {
			for _, r := range out {
				r.Logr.Close()
			}
			return nil, h.err
		}
		if h.done {
			return out, nil
		}
		for i, e := range h.held {
			out = append(out, HeldRun{Run: l.run(e.Run), Exited: e.Exited, Status: unix.WaitStatus(e.Status),
				Logr: os.NewFile(uintptr(h.logrs[i]), "log pipe of run "+e.Run.ID), tickSlack: l.tickSlack()})
		}
	}
}

// closeRuns ends every link and waits for their read loops; runs still
// waited for are not reported (the agent is stopping).
func (rc *runsClient) closeRuns() {
	rc.mu.Lock()
	rc.closed = true
	var ls []*link
	for l := range rc.links {
		ls = append(ls, l)
	}
	rc.mu.Unlock()
	for _, l := range ls {
		l.mc.c.Close()
	}
	rc.wg.Wait()
}

// Verify proves that the run's process is still the one the guard
// started (never a bare pid: docs/live-restart.md): the guard is its
// parent and has not reaped it, so the pid names it; its start time
// (/proc/PID/stat field 22, converted to the initial time namespace's
// ticks on both sides) and its cgroup2 leaf (/proc/PID/cgroup) must
// match the record too. Errors say which check failed.
func (h HeldRun) Verify() error {
	if h.Exited {
		return nil
	}
	st, err := kernfile.ReadProcStat(h.PID)
	if err != nil {
		return fmt.Errorf("run %s: pid %d: %w", h.ID, h.PID, err)
	}
	// Both in ticks of the initial time namespace (boottime.StartTicks).
	start := boottime.StartTicks(st.StartTicks)
	if start != h.StartTicks && !(h.tickSlack && (start == h.StartTicks+1 || start+1 == h.StartTicks)) {
		return fmt.Errorf("run %s: pid %d started at tick %d, the run at %d: another process", h.ID, h.PID, start, h.StartTicks)
	}
	if h.Leaf == "" {
		return nil
	}
	cg, err := kernfile.ProcCgroup2(h.PID)
	if err != nil && !errors.Is(err, kernfile.ErrNoCgroup2) {
		return fmt.Errorf("run %s: pid %d: %w", h.ID, h.PID, err)
	}
	if cg != "" && cg != "/" && strings.HasSuffix(h.Leaf, cg) {
		return nil
	}
	return fmt.Errorf("run %s: pid %d is not in the run's cgroup %s: %w", h.ID, h.PID, h.Leaf, ErrElsewhere)
}

// ErrElsewhere marks a run (HeldRun.Verify) whose process is the run's
// (the guard's unreaped child, the same start time) but lives outside
// the run's cgroup leaf: moved from outside, or started by a guard of
// another cgroup root. It is not adopted, and is killed by its pid, since
// no clean-up of the agent's cgroups would reach it.
var ErrElsewhere = errors.New("the run's process lives outside its cgroup")
