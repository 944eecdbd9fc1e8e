package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	kick   chan struct{}
	quit   chan struct{}
	done   chan struct{} // closed when send has returned
	closed bool

	runs runsClient // the connection: the deadlines and the runs (worker.Spawner)
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
// until this one sends its own. A guard of the previous release (two
// sockets: legacy.go) is used as it is, until it exits.
//
// Errors: this process's time namespace cannot be read
// (internal/boottime); the guard that listens serves another cgroup_root
// (ErrForeign: see Check); the guard could not be started, did not listen
// within readyTimeout, or did not answer the hello within answerTimeout.
func Start(ctx context.Context, opts Options) (*Client, error) {
	if _, err := boottime.Offset(); err != nil {
		return nil, fmt.Errorf("lease guard: %w", err)
	}
	c := &Client{opts: opts, log: opts.Log, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.runs.opts, c.runs.log = opts, c.log
	c.runs.kick = func() {
		c.mu.Lock()
		none := c.latest == 0 // nothing to send yet
		c.mu.Unlock()
		if none {
			return
		}
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	l, err := c.runs.attach(ctx, true)
	if err != nil {
		c.runs.closeRuns()
		return nil, err
	}
	if l.v1 != nil {
		c.log.Info("lease guard of the previous release connected: its two sockets are used until it exits", "guard_pid", l.pid,
			"socket", SocketPath(opts.DataDir), "runs_socket", legacyRunsSocketPath(opts.DataDir), "boottime_offset", time.Duration(l.offset))
	} else {
		c.log.Info("lease guard connected", "guard_pid", l.pid, "socket", SocketPath(opts.DataDir))
	}
	go c.send()
	return c, nil
}

// PID returns the pid of the guard the client is connected to (0 while
// it is not).
func (c *Client) PID() int {
	return c.runs.pid()
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
	c.stop()
	rc := &c.runs
	defer rc.closeRuns()
	rc.mu.Lock()
	rc.releasing = true // a link that ends now is not made again
	l := rc.live
	rc.mu.Unlock()
	if l != nil {
		if rc.releaseOn(l) == nil {
			return rc.released(ctx, l)
		}
		l.mc.c.Close() // the guard behind it is gone or hung: ask the one listening
	}
	l, err := rc.dial(ctx)
	if errors.Is(err, errHung) {
		// Every job is gone: a guard that does not answer has nothing
		// to guard, and its leaf must empty for the root to go.
		return rc.endHung(ctx, err)
	}
	if err != nil {
		c.log.Info("no lease guard to release", "reason", err)
		return nil
	}
	if err := rc.releaseOn(l); err != nil {
		l.mc.c.Close()
		return fmt.Errorf("release the lease guard: %w", err)
	}
	return rc.released(ctx, l)
}

// released waits, within ctx (else answerTimeout), for the guard to
// close l as it exits.
func (rc *runsClient) released(ctx context.Context, l *link) error {
	wait := answerTimeout
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-l.done:
		rc.logger().Info("lease guard released")
		return nil
	case <-t.C:
		l.mc.c.Close()
		return fmt.Errorf("release the lease guard: it acknowledged but did not exit within %s", wait.Round(time.Millisecond))
	}
}

// Close ends the client without release: the guard keeps the last
// deadline and kills every job when it passes. A nil Client does nothing.
func (c *Client) Close() {
	if c == nil {
		return
	}
	c.stop()
	c.runs.closeRuns()
}

// stop ends send, once.
func (c *Client) stop() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.quit)
	<-c.done
}

// send forwards the newest deadline at every kick, reconnecting when the
// guard is gone (it exited after a deadline passed, or was killed) or
// hung. It logs a failure when it first happens and the recovery.
func (c *Client) send() {
	defer close(c.done)
	newest := func() int64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.latest
	}
	failing := false
	for {
		select {
		case <-c.quit:
			return
		case <-c.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		v, err := c.runs.forward(ctx, newest)
		cancel()
		if errors.Is(err, errClientClosed) {
			return
		}
		if err != nil {
			if !failing {
				c.log.Error("lease guard unreachable: if this agent dies now its jobs' forked processes outlive it; retrying at the next renewal", "error", err)
			}
			failing = true
			continue
		}
		c.mu.Lock()
		c.acked = v
		c.mu.Unlock()
		if failing {
			c.log.Info("lease guard holds the deadline again", "guard_pid", c.runs.pid())
		}
		failing = false
	}
}

// hung reports whether the guard that did not answer in time is to be
// ended: it is stopped (SIGSTOP, a debugger: state T or t in
// /proc/PID/stat), or has not answered for hungAfter, or cannot be found
// in its cgroup leaf. It starts the silence's clock at the first call of
// a run of failures.
func (rc *runsClient) hung() bool {
	rc.mu.Lock()
	if rc.silentSince.IsZero() {
		rc.silentSince = time.Now()
	}
	rc.silent++
	long := time.Since(rc.silentSince) >= hungAfter
	rc.mu.Unlock()
	if long {
		return true
	}
	h, err := cgroup.Open(rc.opts.CgroupRoot)
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

// endHung kills a guard that does not answer (why), through its cgroup
// leaf <cgroup_root>/guard: only a guard of this agent's runs there, and
// the agent holds its cgroup root's lock. SIGKILL ends a stopped process
// too.
//
// Errors: the leaf cannot be loaded or its processes killed.
func (rc *runsClient) endHung(ctx context.Context, why error) error {
	h, err := cgroup.Open(rc.opts.CgroupRoot)
	if err == nil {
		var g *cgroup.Group
		if g, err = h.Load(CgroupLeaf); err == nil {
			err = g.Kill(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("end the lease guard that does not answer (%v): %w", why, err)
	}
	rc.logger().Warn("ended a lease guard that did not answer (stopped or stuck); starting a new one", "reason", why)
	return nil
}
