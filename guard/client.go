package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/boottime"
	"github.com/prometheus/procfs"
)

// Options configure the agent's side of the guard.
type Options struct {
	// DataDir and CgroupRoot are the agent's ([agent] data_dir and
	// cgroup_root); a guard started by Start serves exactly these.
	DataDir, CgroupRoot string
	// Command is the argument vector that runs the guard, without its
	// flags: normally {path of the berth binary, "guard"}. Start appends
	// --data-dir and --cgroup-root.
	Command []string
	// Env is the guard's environment; nil: this process's, without
	// systemd's notification, watchdog and socket-activation variables.
	Env []string
	// Log receives the client's log; nil: slog.Default().
	Log *slog.Logger
}

// answerTimeout bounds how long the agent waits for the guard's answer to
// one message: a guard that does not answer in that time is hung.
const answerTimeout = 2 * time.Second

// readyTimeout bounds how long Start waits for a guard it started to
// listen.
const readyTimeout = 10 * time.Second

// Client is the agent's connection to its guard. Create it with Start;
// Deadline may be called from any goroutine; Release or Close end it.
type Client struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	latest int64 // boottime.Now ns of the newest deadline; 0: none yet
	acked  int64 // the newest deadline the guard acknowledged
	conn   *net.UnixConn
	pid    int // the guard's, from its hello
	kick   chan struct{}
	quit   chan struct{}
	done   chan struct{} // closed when send has returned
	closed bool

	runs runsClient // the runs socket: worker.Spawner

	// silentSince is when the guard first failed to answer a hello in
	// time in the current run of failures (zero: it answers), silent how
	// many hellos went unanswered since; see hung.
	silentSince time.Time
	silent      int
}

// hungAfter is how long a guard that runs (not stopped) may go without
// answering before it is taken for hung and ended: a guard forking
// thousands of jobs on a loaded host answers late, and ending it kills
// every job's main process (their parent-death signal).
const hungAfter = 30 * time.Second

// Start connects to the guard of opts.DataDir, starting one when none
// listens (a detached `berth guard`: see spawn), and returns the client
// whose Deadline calls reach it. The guard then holds no deadline until
// the first Deadline; a guard an earlier agent left keeps that agent's
// until this one sends its own.
//
// Errors: this process's time namespace cannot be read
// (internal/boottime); the guard could not be started, did not listen
// within readyTimeout, or did not answer the hello within answerTimeout.
func Start(ctx context.Context, opts Options) (*Client, error) {
	if _, err := boottime.Offset(); err != nil {
		return nil, fmt.Errorf("lease guard: %w", err)
	}
	c := &Client{opts: opts, log: opts.Log, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	c.runs.dataDir = opts.DataDir
	c.runs.kick = func() {
		c.mu.Lock()
		none := c.latest == 0 // nothing to send: Start connected a guard
		c.mu.Unlock()
		if none {
			return
		}
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.runs.log = c.log
	conn, pid, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.conn, c.pid = conn, pid
	c.log.Info("lease guard connected", "guard_pid", pid, "socket", SocketPath(opts.DataDir))
	go c.send()
	return c, nil
}

// PID returns the pid of the guard the client is connected to (0 while
// it is not).
func (c *Client) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid
}

// Deadline hands the guard the agent's new fencing deadline t (a time
// read from time.Now, with its monotonic reading): the guard kills every
// job when t passes without a later one. It never blocks: the newest
// deadline is sent by the client's own goroutine, which reconnects (and
// starts a new guard) when the guard is gone. A nil Client ignores it.
func (c *Client) Deadline(t time.Time) {
	if c == nil {
		return
	}
	c.deadline(t)
}

// deadline is Deadline, returning the boottime.Now ns it hands on.
func (c *Client) deadline(t time.Time) int64 {
	c.mu.Lock()
	v := onBoottime(t)
	c.latest = v
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return v
}

// DeadlineSync is Deadline, then waits until the guard has acknowledged
// t or a later deadline: a hand-over to a new agent program tells the
// guard the deadline of the renewal it has just made before it execs.
// Errors: ctx ended first (the guard was not reachable in time).
func (c *Client) DeadlineSync(ctx context.Context, t time.Time) error {
	if c == nil {
		return nil
	}
	// The very value sent: t converted again would be some ns later or
	// earlier (two clocks read twice) and might never be acknowledged.
	want := c.deadline(t)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		c.mu.Lock()
		acked := c.acked
		c.mu.Unlock()
		if acked >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the lease guard did not acknowledge the deadline: %w", ctx.Err())
		case <-tick.C:
		}
		// A round that failed (a guard late to answer) is tried again
		// every answerTimeout, as renewals would.
		if n%int(answerTimeout/(10*time.Millisecond)) == 0 {
			select {
			case c.kick <- struct{}{}:
			default:
			}
		}
	}
}

// Release tells the guard that the agent has stopped every job: the
// guard exits without killing anything. Release waits (within ctx) until
// the guard has closed its end, so that its cgroup is about to be empty
// when Release returns. A guard that is gone (it killed every job at a
// deadline the agent missed, or was killed) is no error. A nil Client
// does nothing.
//
// Errors: a guard listens but did not acknowledge the release within
// answerTimeout, or did not close the connection before ctx ended.
func (c *Client) Release(ctx context.Context) error {
	if c == nil {
		return nil
	}
	c.runs.closeRuns()
	conn := c.stop()
	if conn != nil {
		if exchange(conn, message{kind: kindRelease}, kindAck) == nil {
			return c.released(ctx, conn)
		}
		conn.Close() // the guard behind it is gone or hung: ask the one listening
	}
	conn, _, err := c.dial(ctx)
	if errors.Is(err, errHung) {
		// Every job is gone: a guard that does not answer has nothing
		// to guard, and its leaf must empty for the root to go.
		return c.endHung(ctx, err)
	}
	if err != nil {
		c.log.Info("no lease guard to release", "reason", err)
		return nil
	}
	if err := exchange(conn, message{kind: kindRelease}, kindAck); err != nil {
		conn.Close()
		return fmt.Errorf("release the lease guard: %w", err)
	}
	return c.released(ctx, conn)
}

// released waits, within ctx, for the guard to close conn as it exits.
func (c *Client) released(ctx context.Context, conn *net.UnixConn) error {
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(d)
	} else {
		_ = conn.SetReadDeadline(time.Now().Add(answerTimeout))
	}
	_, err := conn.Read(make([]byte, msgSize))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("release the lease guard: it acknowledged but did not exit (%v)", err)
	}
	c.log.Info("lease guard released")
	return nil
}

// Close ends the client without release: the guard keeps the last
// deadline and kills every job when it passes. A nil Client does nothing.
func (c *Client) Close() {
	if c == nil {
		return
	}
	c.runs.closeRuns()
	if conn := c.stop(); conn != nil {
		conn.Close()
	}
}

// stop ends send and returns the connection (nil if there is none), once.
func (c *Client) stop() *net.UnixConn {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.quit)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	conn := c.conn
	c.conn = nil
	return conn
}

// send forwards the newest deadline at every kick, reconnecting when the
// guard is gone (it exited after a deadline passed, or was killed) or
// hung. It logs a failure when it first happens and the recovery.
func (c *Client) send() {
	defer close(c.done)
	failing := false
	for {
		select {
		case <-c.quit:
			return
		case <-c.kick:
		}
		c.mu.Lock()
		conn, latest := c.conn, c.latest
		c.mu.Unlock()
		err := errors.New("not connected")
		if conn != nil {
			err = exchange(conn, message{kind: kindDeadline, value: uint64(latest)}, kindAck)
		}
		if err != nil {
			if conn != nil {
				conn.Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
			var pid int
			conn, pid, err = c.connect(ctx)
			cancel()
			if err == nil {
				// The reconnect may have taken seconds (a new guard
				// started): send the newest deadline, not the one this
				// round began with, which may have passed meanwhile.
				c.mu.Lock()
				latest = c.latest
				c.mu.Unlock()
				err = exchange(conn, message{kind: kindDeadline, value: uint64(latest)}, kindAck)
			}
			c.mu.Lock()
			c.conn, c.pid = conn, pid
			if err != nil {
				c.conn, c.pid = nil, 0
			}
			c.mu.Unlock()
			if err != nil {
				if conn != nil {
					conn.Close()
				}
				if !failing {
					c.log.Error("lease guard unreachable: if this agent dies now its jobs' forked processes outlive it; retrying at the next renewal", "error", err)
				}
				failing = true
				continue
			}
			c.log.Warn("lease guard reconnected", "guard_pid", pid)
		}
		c.mu.Lock()
		c.acked = latest
		c.silentSince, c.silent = time.Time{}, 0
		c.mu.Unlock()
		if failing {
			c.log.Info("lease guard holds the deadline again")
		}
		failing = false
	}
}

// connect dials the guard, starting one when none listens, and exchanges
// hellos.
func (c *Client) connect(ctx context.Context) (*net.UnixConn, int, error) {
	conn, pid, err := c.dial(ctx)
	if err == nil {
		return conn, pid, nil
	}
	if errors.Is(err, errHung) {
		// A guard that accepts but does not answer (stopped, stuck) would
		// keep this agent from starting, and could kill its jobs at a
		// deadline it held when it runs again: end it. One that runs and
		// is only late (busy forking on a loaded host) is given
		// hungAfter: ending it would kill every job.
		if !c.hung() {
			return nil, 0, fmt.Errorf("%w; it runs, so it is given %s before it is ended", err, hungAfter)
		}
		if kerr := c.endHung(ctx, err); kerr != nil {
			return nil, 0, kerr
		}
	}
	if err := spawn(ctx, c.opts); err != nil {
		return nil, 0, err
	}
	return c.dial(ctx)
}

// hung reports whether the guard that did not answer in time is to be
// ended: it is stopped (SIGSTOP, a debugger: state T or t in
// /proc/PID/stat), or has not answered for hungAfter, or cannot be found
// in its cgroup leaf. It starts the silence's clock at the first call of
// a run of failures.
func (c *Client) hung() bool {
	c.mu.Lock()
	if c.silentSince.IsZero() {
		c.silentSince = time.Now()
	}
	c.silent++
	long := time.Since(c.silentSince) >= hungAfter
	c.mu.Unlock()
	if long {
		return true
	}
	h, err := cgroup.Open(c.opts.CgroupRoot)
	if err != nil {
		return true
	}
	g, err := h.Load(CgroupLeaf)
	if err != nil {
		return true
	}
	pids, err := g.Pids()
	if err != nil || len(pids) == 0 {
		return true
	}
	for _, pid := range pids {
		if st, ok := procState(pid); !ok || st == 'T' || st == 't' {
			return true
		}
	}
	return false
}

// procState is the state letter of process pid (/proc/PID/stat field 3,
// proc(5)); ok is false when it is gone.
func procState(pid int) (byte, bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, false
	}
	st, err := p.Stat()
	if err != nil || st.State == "" {
		return 0, false
	}
	return st.State[0], true
}

// errHung marks a guard that accepted a connection but did not answer.
var errHung = errors.New("the lease guard does not answer")

// endHung kills a guard that does not answer (why), through its cgroup
// leaf <cgroup_root>/guard: only a guard of this agent's runs there, and
// the agent holds its cgroup root's lock. SIGKILL ends a stopped process
// too.
//
// Errors: the leaf cannot be loaded or its processes killed.
func (c *Client) endHung(ctx context.Context, why error) error {
	h, err := cgroup.Open(c.opts.CgroupRoot)
	if err == nil {
		var g *cgroup.Group
		if g, err = h.Load(CgroupLeaf); err == nil {
			err = g.Kill(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("end the lease guard that does not answer (%v): %w", why, err)
	}
	c.log.Warn("ended a lease guard that did not answer (stopped or stuck); starting a new one", "reason", why)
	return nil
}

// dial connects to the socket and exchanges hellos.
func (c *Client) dial(ctx context.Context) (*net.UnixConn, int, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", SocketPath(c.opts.DataDir))
	if err != nil {
		return nil, 0, fmt.Errorf("connect to the lease guard: %w", err)
	}
	conn := nc.(*net.UnixConn)
	if uid, err := peerUID(conn); err != nil || uid != 0 {
		conn.Close()
		return nil, 0, fmt.Errorf("connect to the lease guard %s: its peer is uid %d, not root (%v)", SocketPath(c.opts.DataDir), uid, err)
	}
	_ = conn.SetDeadline(time.Now().Add(answerTimeout))
	m, err := roundTrip(conn, message{kind: kindHello, value: uint64(os.Getpid())})
	if err == nil && m.kind != kindHello {
		err = fmt.Errorf("answered %s to hello", m.kind)
	}
	if err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("connect to the lease guard %s: %w: %w", SocketPath(c.opts.DataDir), errHung, err)
	}
	return conn, int(m.value), nil
}

// exchange sends m and waits, within answerTimeout, for an answer of kind
// want with m's value.
func exchange(conn *net.UnixConn, m message, want kind) error {
	_ = conn.SetDeadline(time.Now().Add(answerTimeout))
	a, err := roundTrip(conn, m)
	if err != nil {
		return err
	}
	if a.kind != want || a.value != m.value {
		return fmt.Errorf("guard answered %s %d to %s %d", a.kind, a.value, m.kind, m.value)
	}
	return nil
}

// roundTrip writes m and reads one answer, within conn's deadline.
func roundTrip(conn *net.UnixConn, m message) (message, error) {
	if _, err := conn.Write(m.encode()); err != nil {
		return message{}, fmt.Errorf("send %s: %w", m.kind, err)
	}
	buf := make([]byte, msgSize+1)
	n, err := conn.Read(buf)
	if err != nil {
		return message{}, fmt.Errorf("wait for the answer to %s: %w", m.kind, err)
	}
	return decode(buf[:n])
}
