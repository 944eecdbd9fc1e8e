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
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// lostStatus is the wait status a run is given when the connection to
// the guard that started it ends: the guard is gone, and its children
// with it (their parent-death signal is SIGKILL).
const lostStatus = unix.WaitStatus(unix.SIGKILL)

// runsClient is the agent's side of the runs socket; Client embeds it
// as the worker.Spawner the agent's workers start through.
type runsClient struct {
	dataDir string
	kick    func() // has the deadline sender reconnect, starting a guard if none runs
	log     *slog.Logger
	// beforeRelist, when set (tests), runs when a connection has ended,
	// before the client connects again to list the runs.
	beforeRelist func()

	dialMu sync.Mutex // one dial at a time; never held with mu

	mu      sync.Mutex
	conn    *msgConn
	closed  bool
	seq     uint64
	waiting map[uint64]chan runMsg           // spawn answers, by Seq
	onExit  map[string]func(unix.WaitStatus) // by run ID
	pending map[string]unix.WaitStatus       // exits nobody waits for yet
	// owned holds the run IDs the guard told of (spawned, held, exited),
	// kept across a relist while the guard still holds them; lost those
	// the guard no longer holds (relist) that no one waited for yet:
	// their wait gets lostStatus at once.
	owned   map[string]bool
	lost    map[string]bool
	listing *listing // during Held
	// relisting is the connection a relist is listing the runs on, not
	// yet the client's (conn): closeRuns ends it too.
	relisting *msgConn
	// gone holds the connections whose read loop has ended.
	gone map[*msgConn]bool
	wg   sync.WaitGroup
}

// listing routes opHeld messages to one Held call; done is closed when
// Held returns, so that the read loop never blocks on a list no one reads.
type listing struct {
	ch   chan heldMsg
	done chan struct{}
}

// heldMsg is one opHeld with its descriptor, or the list's end (done).
type heldMsg struct {
	m    runMsg
	logr int
	done bool
	err  error
}

// HeldRun is a run an earlier agent started, as the guard holds it.
type HeldRun struct {
	worker.Run
	// Exited is true when the run's main process has ended (Status).
	Exited bool
	Status unix.WaitStatus
	// Logr is the read end of the run's log pipe.
	Logr *os.File
}

var _ worker.Spawner = (*Client)(nil)

// spawnTimeout bounds the wait for the guard's answer to a spawn: a
// start that takes longer (a guard stuck under the cgroup mutex) fails,
// and the worker reports it.
const spawnTimeout = 30 * time.Second

// ensure returns the runs connection, dialling it (and having a guard
// started when none listens) if there is none. The dial runs without mu,
// so that exits and waits go on meanwhile.
func (rc *runsClient) ensure(ctx context.Context) (*msgConn, error) {
	rc.mu.Lock()
	if rc.closed {
		rc.mu.Unlock()
		return nil, errors.New("lease guard client closed")
	}
	if mc := rc.conn; mc != nil {
		rc.mu.Unlock()
		return mc, nil
	}
	rc.mu.Unlock()
	rc.dialMu.Lock()
	defer rc.dialMu.Unlock()
	rc.mu.Lock()
	if mc := rc.conn; mc != nil { // another caller dialled meanwhile
		rc.mu.Unlock()
		return mc, nil
	}
	rc.mu.Unlock()
	c, err := rc.dial(ctx)
	// No guard listens (it ended): the deadline sender brings one up
	// (kick); look again until ctx ends.
	for wait := 20 * time.Millisecond; err != nil && rc.kick != nil; wait = min(2*wait, 500*time.Millisecond) {
		rc.kick()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (and no guard came up: %w)", err, ctx.Err())
		case <-t.C:
		}
		c, err = rc.dial(ctx)
	}
	if err != nil {
		return nil, err
	}
	mc := &msgConn{c: c}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.closed {
		c.Close()
		return nil, errors.New("lease guard client closed")
	}
	rc.conn, rc.owned = mc, map[string]bool{}
	rc.wg.Add(1)
	go rc.read(mc)
	return mc, nil
}

func (rc *runsClient) dial(ctx context.Context) (*net.UnixConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", RunsSocketPath(rc.dataDir))
	if err != nil {
		return nil, fmt.Errorf("connect to the lease guard's runs socket: %w", err)
	}
	c := nc.(*net.UnixConn)
	if uid, err := peerUID(c); err != nil || uid != 0 {
		c.Close()
		return nil, fmt.Errorf("connect to %s: its peer is uid %d, not root (%v)", RunsSocketPath(rc.dataDir), uid, err)
	}
	return c, nil
}

// read routes the guard's messages until the connection ends; then, if
// it was the live connection (conn), it has the runs listed again over a
// new one (relist), which reports the runs the guard no longer holds lost
// (SIGKILL). It never blocks on a send to the guard, so that exits keep
// coming however busy the agent is.
func (rc *runsClient) read(mc *msgConn) {
	defer rc.wg.Done()
	buf, oob := newRecvBuffers()
	var err error
	for {
		var m runMsg
		var fds []int
		m, fds, err = mc.recv(buf, oob)
		if err != nil {
			break
		}
		switch m.Op {
		case opSpawned:
			closeAll(fds)
			rc.mu.Lock()
			ch := rc.waiting[m.Seq]
			delete(rc.waiting, m.Seq)
			if m.Run != nil && m.Error == "" {
				rc.owned[m.Run.ID] = true
			}
			rc.mu.Unlock()
			if ch != nil {
				ch <- m // room for one
			}
		case opExited:
			closeAll(fds)
			if m.Run != nil {
				rc.exit(m.Run.ID, unix.WaitStatus(m.Status))
			}
		case opHeld, opListed:
			rc.mu.Lock()
			l := rc.listing
			if m.Op == opHeld && m.Run != nil {
				rc.owned[m.Run.ID] = true
			}
			rc.mu.Unlock()
			if l == nil || m.Op == opHeld && (len(fds) != 1 || m.Run == nil) {
				closeAll(fds)
				continue
			}
			h := heldMsg{done: true}
			if m.Op == opHeld {
				h = heldMsg{m: m, logr: fds[0]}
			}
			select {
			case l.ch <- h:
			case <-l.done:
				closeAll(fds)
			}
		default:
			closeAll(fds)
		}
	}
	rc.mu.Lock()
	live := rc.conn == mc // a relist's connection is not live until its list is done
	if live {
		rc.conn = nil
	}
	if rc.gone == nil {
		rc.gone = map[*msgConn]bool{}
	}
	if !live {
		rc.gone[mc] = true // a relist's connection: relist looks
	}
	mc.c.Close()
	closing := rc.closed
	waiting := rc.waiting
	rc.waiting = map[uint64]chan runMsg{}
	l := rc.listing
	rc.mu.Unlock()
	for seq, ch := range waiting {
		ch <- runMsg{Op: opSpawned, Seq: seq, Error: fmt.Sprintf("the lease guard's connection ended: %v", err)}
	}
	if l != nil {
		select {
		case l.ch <- heldMsg{err: fmt.Errorf("the lease guard's connection ended: %w", err)}:
		case <-l.done:
		}
	}
	if closing || !live {
		return
	}
	rc.relist(err)
}

// relistTries is how many connections a relist tries before it counts
// the runs lost.
const relistTries = 3

// relist follows the end of the live connection (cause): the guard may
// live on (it closed a connection whose writes stalled for
// guardSendTimeout, or the connection broke), so the client connects
// again, without starting a guard, and lists the runs the guard holds.
// A run this client knew of that the guard still holds is re-attached:
// its exit, if it came meanwhile, is delivered with its real status,
// else it is waited for on the new connection (a running run's process
// is checked as adoption does, HeldRun.Verify). A run the guard no longer
// holds, or every run when no guard answers (it is gone, and the runs'
// main processes with it), is lost: its wait gets lostStatus, as before
// relisting. A running run the client never heard of (a spawn whose
// answer the broken connection lost; the worker has failed that start)
// is killed and forgotten; an ended one is forgotten (its forget was
// lost with the connection).
func (rc *runsClient) relist(cause error) {
	if rc.beforeRelist != nil {
		rc.beforeRelist()
	}
	rc.dialMu.Lock()
	defer rc.dialMu.Unlock()
	rc.mu.Lock()
	known := make(map[string]bool, len(rc.owned))
	for id := range rc.owned {
		known[id] = true
	}
	rc.mu.Unlock()
	rc.logger().Warn("the lease guard's runs connection ended; listing its runs again", "cause", cause, "runs", len(known))
	var (
		held []HeldRun
		mc   *msgConn
		err  error
	)
	for try := 1; try <= relistTries; try++ {
		held, mc, err = rc.relistOnce()
		if err == nil || errors.Is(err, errClientClosed) {
			break
		}
	}
	if errors.Is(err, errClientClosed) {
		return
	}
	byID := make(map[string]HeldRun, len(held))
	for _, h := range held {
		h.Logr.Close() // the worker reads the pipe through its own read end
		byID[h.ID] = h
	}
	// Checks that read /proc run before the lock. A run whose process is
	// gone was reaped by the guard after the list: its exit comes on mc.
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
	rc.relisting = nil // relistOnce left it set on success: closeRuns ends it until now
	if err == nil && rc.closed {
		rc.mu.Unlock()
		mc.c.Close()
		return
	}
	if rc.lost == nil {
		rc.lost = map[string]bool{}
	}
	if err == nil && rc.gone[mc] {
		err = errors.New("the lease guard's connection ended after the list")
		mc.c.Close()
	}
	delete(rc.gone, mc)
	lose := func(id string) {
		lost++
		delete(rc.owned, id)
		if f := rc.onExit[id]; f != nil {
			delete(rc.onExit, id)
			calls = append(calls, func() { f(lostStatus) })
		} else if _, done := rc.pending[id]; !done {
			rc.lost[id] = true
		}
	}
	for id := range known {
		h, ok := byID[id]
		switch {
		case err != nil || !ok:
			lose(id)
		case bad[id] != nil:
			rc.logger().Warn("a run the lease guard holds fails its identity check after the reconnection: lost", "run", id, "error", bad[id])
			lose(id)
		case reaped[id]:
			rc.owned[id] = true // its exit is on its way on mc
			delivered++
		case h.Exited:
			rc.owned[id] = true
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
			rc.owned[id] = true
			reattached++
		}
	}
	var stray []HeldRun
	if err == nil {
		for id, h := range byID {
			if !known[id] {
				stray = append(stray, h)
				delete(rc.owned, id) // marked by the list; nobody waits for it
				delete(rc.pending, id)
			}
		}
		rc.conn = mc
	}
	rc.mu.Unlock()
	for _, f := range calls {
		f()
	}
	if err != nil {
		rc.logger().Error("the lease guard is gone: its runs are lost and their jobs handled by their restart policy", "error", err, "lost", lost)
		return
	}
	for _, h := range stray {
		if !h.Exited && h.Verify() == nil {
			_ = unix.Kill(h.PID, unix.SIGKILL) // the guard's unreaped child: its pid names it
			rc.logger().Warn("killed a run whose start was lost with the runs connection", "job_id", h.JobID, "run", h.ID, "pid", h.PID)
		}
		_ = mc.send(runMsg{Op: opForget, Run: &worker.Run{ID: h.ID}})
	}
	rc.logger().Info("runs re-attached after the runs connection ended", "running", reattached, "exited", delivered, "lost", lost)
}

// errClientClosed is a relist cut short by closeRuns.
var errClientClosed = errors.New("lease guard client closed")

// relistOnce connects to the runs socket and lists the runs held over the
// new connection, which is not live (conn) yet: no spawn goes through it
// before the list is done, so every running run the client does not know
// of is a stray. On success the connection stays in relisting (closeRuns
// ends it) until relist makes it live. Errors: no guard answers, the list
// fails, or errClientClosed.
func (rc *runsClient) relistOnce() ([]HeldRun, *msgConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	c, err := rc.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	mc := &msgConn{c: c}
	rc.mu.Lock()
	if rc.closed {
		rc.mu.Unlock()
		c.Close()
		return nil, nil, errClientClosed
	}
	rc.relisting = mc
	rc.wg.Add(1)
	rc.mu.Unlock()
	go rc.read(mc)
	held, err := rc.list(ctx, mc)
	rc.mu.Lock()
	closed, gone := rc.closed, rc.gone[mc]
	rc.mu.Unlock()
	switch {
	case closed:
		err = errClientClosed
	case err == nil && gone:
		err = errors.New("the lease guard's connection ended during the list")
	}
	if err != nil {
		rc.mu.Lock()
		rc.relisting = nil
		delete(rc.gone, mc)
		rc.mu.Unlock()
	}
	if err != nil {
		for _, h := range held {
			h.Logr.Close()
		}
		c.Close()
		return nil, nil, fmt.Errorf("list the lease guard's runs again: %w", err)
	}
	return held, mc, nil
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
	rc.owned[id] = true
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

// wait registers f for run id's exit: a status already come (or lostStatus
// when the connection that told of the run has ended) is delivered at
// once.
func (rc *runsClient) wait(id string, f func(unix.WaitStatus)) {
	rc.mu.Lock()
	ws, done := rc.pending[id]
	switch {
	case done:
		delete(rc.pending, id)
	case rc.lost[id] || !rc.owned[id] && rc.conn == nil:
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
// guard's deadline. Errors: the guard cannot be reached or started, or
// does not answer within spawnTimeout ("lease guard"), or its launcher's
// (the program, the cgroup).
func (c *Client) Spawn(x *worker.Exec, r worker.Run, logw *os.File, logr int, onExit func(unix.WaitStatus)) (worker.Run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	rc := &c.runs
	mc, err := rc.ensure(ctx)
	if err != nil {
		return worker.Run{}, fmt.Errorf("start through the lease guard: %w", err)
	}
	ch := make(chan runMsg, 1)
	rc.mu.Lock()
	rc.seq++
	seq := rc.seq
	if rc.waiting == nil {
		rc.waiting = map[uint64]chan runMsg{}
	}
	rc.waiting[seq] = ch
	rc.mu.Unlock()
	forget := func() {
		rc.mu.Lock()
		delete(rc.waiting, seq)
		rc.mu.Unlock()
	}
	if err := mc.send(runMsg{Op: opSpawn, Seq: seq, Exec: x, Run: &r}, int(logw.Fd()), logr); err != nil {
		forget()
		var le localError
		if !errors.As(err, &le) {
			mc.c.Close() // the connection is broken: the read loop reports what ran through it
		}
		return worker.Run{}, fmt.Errorf("start through the lease guard: %w", err)
	}
	t := time.NewTimer(spawnTimeout)
	defer t.Stop()
	var a runMsg
	select {
	case a = <-ch: // the read loop answers every waiter, also when the connection ends
	case <-t.C:
		forget()
		return worker.Run{}, fmt.Errorf("start through the lease guard: no answer within %s", spawnTimeout)
	}
	if a.Error != "" || a.Run == nil {
		msg := strings.TrimPrefix(a.Error, "start ")
		if a.Transient {
			return worker.Run{}, worker.TransientStartError(msg)
		}
		return worker.Run{}, errors.New(msg)
	}
	rc.wait(a.Run.ID, onExit)
	return *a.Run, nil
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
	mc := rc.conn
	rc.mu.Unlock()
	if mc != nil {
		_ = mc.send(runMsg{Op: opForget, Run: &worker.Run{ID: run.ID}})
	}
}

// Held asks the guard for the runs it holds (started for an earlier
// agent, or this one), each with its log pipe's read end, owned by the
// caller. The exit statuses of runs that ended are kept for Adopt.
// Errors: the guard cannot be reached, or the connection ends.
func (c *Client) Held(ctx context.Context) ([]HeldRun, error) {
	rc := &c.runs
	mc, err := rc.ensure(ctx)
	if err != nil {
		return nil, err
	}
	held, err := rc.list(ctx, mc)
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

// list asks the guard over mc for the runs it holds and collects them
// (the read loop of mc routes them here). Errors: ctx ends, or the
// connection does.
func (rc *runsClient) list(ctx context.Context, mc *msgConn) ([]HeldRun, error) {
	l := &listing{ch: make(chan heldMsg, 16), done: make(chan struct{})}
	rc.mu.Lock()
	rc.listing = l
	rc.mu.Unlock()
	var out []HeldRun
	defer func() {
		rc.mu.Lock()
		if rc.listing == l {
			rc.listing = nil
		}
		rc.mu.Unlock()
		close(l.done)
		for {
			select {
			case h := <-l.ch: // sent before done was closed
				if !h.done && h.err == nil {
					unix.Close(h.logr)
				}
			default:
				return
			}
		}
	}()
	if err := mc.send(runMsg{Op: opList}); err != nil {
		return nil, err
	}
	for {
		var h heldMsg
		select {
		case h = <-l.ch:
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
		out = append(out, HeldRun{Run: *h.m.Run, Exited: h.m.Exited, Status: unix.WaitStatus(h.m.Status),
			Logr: os.NewFile(uintptr(h.logr), "log pipe of run "+h.m.Run.ID)})
	}
}

// closeRuns ends the runs connection and waits for its read loop; runs
// still waited for are not reported (the agent is stopping).
func (rc *runsClient) closeRuns() {
	rc.mu.Lock()
	rc.closed = true
	mc, rl := rc.conn, rc.relisting
	rc.mu.Unlock()
	if mc != nil {
		mc.c.Close()
	}
	if rl != nil {
		rl.c.Close()
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
	if start := boottime.StartTicks(st.StartTicks); start != h.StartTicks {
		return fmt.Errorf("run %s: pid %d started at tick %d, the run at %d: another process", h.ID, h.PID, start, h.StartTicks)
	}
	if h.Leaf == "" {
		return nil
	}
	p, err := procfs.NewProc(h.PID)
	if err != nil {
		return fmt.Errorf("run %s: pid %d: %w", h.ID, h.PID, err)
	}
	cgs, err := p.Cgroups()
	if err != nil {
		return fmt.Errorf("run %s: pid %d: %w", h.ID, h.PID, err)
	}
	for _, cg := range cgs {
		if cg.HierarchyID == 0 && cg.Path != "/" && strings.HasSuffix(h.Leaf, cg.Path) {
			return nil
		}
	}
	return fmt.Errorf("run %s: pid %d is not in the run's cgroup %s", h.ID, h.PID, h.Leaf)
}
