package guard

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/boottime"
	"github.com/berthd/berth/internal/kernfile"
	"github.com/berthd/berth/worker"
	"golang.org/x/sys/unix"
)

// runs is the guard's side of live restart: it starts jobs' processes for
// the agent (it is their parent, so their exit statuses come to it, with
// or without an agent), keeps each run's record and the read end of its
// log pipe, and hands them to the next agent (docs/live-restart.md).
//
// The agent's connection (setAgent: the newest that said hello) gets the
// exits; a run's record stays until the agent forgets it.
type runs struct {
	log *slog.Logger
	h   *cgroup.Hierarchy
	rt  *worker.Runtime

	mu     sync.Mutex
	held   map[string]*heldRun
	nonce  string // this guard's run IDs: g<pid>-<nonce>.<seq>
	seq    uint64
	conn   *msgConn // the agent's; nil: none
	groups map[string]*cgroup.Group
	closed bool

	wg sync.WaitGroup // spawns, exit notices, replaced notices
}

// guardSendTimeout bounds one write of the guard to its agent.
const guardSendTimeout = 30 * time.Second

// heldRun is one run the guard started.
type heldRun struct {
	run    worker.Run
	logr   int // read end of the run's log pipe; -1: none yet
	exited bool
	status unix.WaitStatus
}

// newRuns starts the worker runtime that launches jobs (this process
// becomes a child subreaper), in a PID namespace whose init is jobsInit
// when that is set (worker.RuntimeOptions.JobsInit). A guard that cannot
// make the namespace (no CAP_SYS_ADMIN: a unit whose bounding set was
// narrowed, a container) says so at WARN and runs the jobs without it, as
// a guard of the previous release did: their main processes die with the
// guard, what they forked lives until the next agent kills it.
func newRuns(log *slog.Logger, h *cgroup.Hierarchy, jobsInit []string) (*runs, error) {
	rt, err := worker.StartRuntimeWith(worker.RuntimeOptions{JobsInit: jobsInit})
	if err != nil && jobsInit != nil {
		log.Warn("guard: jobs run without a PID namespace of their own: a job's forked processes outlive the guard's death until the next agent kills them",
			"error", err)
		rt, err = worker.StartRuntime()
	}
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	nonce := make([]byte, 4)
	_, _ = rand.Read(nonce)
	return &runs{log: log, h: h, rt: rt, held: map[string]*heldRun{}, groups: map[string]*cgroup.Group{},
		nonce: hex.EncodeToString(nonce)}, nil
}

// close waits for every goroutine (the connections are closed first, by
// the server). The runtime's launcher threads end last: the main
// processes they forked die with them (their parent-death signal), as a
// guard that ends must leave no job running unseen.
func (r *runs) close() {
	r.mu.Lock()
	r.closed = true
	r.conn = nil
	r.mu.Unlock()
	r.wg.Wait()
	r.mu.Lock()
	for _, hr := range r.held {
		if hr.logr >= 0 {
			unix.Close(hr.logr)
		}
	}
	r.held = nil
	r.mu.Unlock()
	// Close refuses while a worker of its own runs; the guard has none.
	_ = r.rt.Close()
}

// count is the number of runs held.
func (r *runs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// setAgent makes mc the agent's connection, where exits go; the one it
// replaces is told so (opReplaced, so that its agent does not take the
// guard back at once) and closed.
func (r *runs) setAgent(mc *msgConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.conn
	r.conn = mc
	if prev == nil || prev == mc || r.closed {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = prev.send(runMsg{Op: opReplaced})
		prev.c.Close()
	}()
}

// isAgent reports whether mc is the agent's connection.
func (r *runs) isAgent(mc *msgConn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn == mc
}

// disconnected notes the end of mc: if it was the agent's, exits wait
// for the next agent.
func (r *runs) disconnected(mc *msgConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == mc {
		r.conn = nil
	}
}

// serve handles one runs message of the agent's connection mc, with the
// descriptors that came with it (owned here).
func (r *runs) serve(mc *msgConn, m runMsg, files []int) {
	switch m.Op {
	case opSpawn:
		if len(files) != 2 || m.Exec == nil || m.Run == nil {
			closeAll(files)
			_ = mc.send(runMsg{Op: opSpawned, Seq: m.Seq, Error: "spawn without exec, run and two descriptors"})
			return
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			closeAll(files)
			return
		}
		r.wg.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.wg.Done()
			r.spawn(mc, m, os.NewFile(uintptr(files[0]), "log pipe"), files[1])
		}()
	case opForget:
		closeAll(files)
		if m.Run != nil {
			r.forget(m.Run.ID)
		}
	case opList:
		closeAll(files)
		r.list(mc, min(m.Batch, maxHeldBatch))
	}
}

// spawn starts one run and answers the agent. logw is the job's stdout
// (closed here once the job has it), logr kept for a later agent.
func (r *runs) spawn(mc *msgConn, m runMsg, logw *os.File, logr int) {
	defer logw.Close()
	run := *m.Run
	g, err := r.group(run.Cgroup)
	if err == nil {
		// The record exists before the fork, so that an exit that comes
		// before the fork returns finds it.
		r.mu.Lock()
		r.seq++
		run.ID = "g" + strconv.Itoa(os.Getpid()) + "-" + r.nonce + "." + strconv.FormatUint(r.seq, 10)
		r.held[run.ID] = &heldRun{run: run, logr: -1}
		r.mu.Unlock()
		id := run.ID
		run.PID, err = r.rt.Launch(m.Exec, g, logw, func(ws unix.WaitStatus) { r.exited(id, ws) })
		if err != nil {
			r.mu.Lock()
			delete(r.held, id)
			r.mu.Unlock()
		}
	}
	if err != nil {
		unix.Close(logr)
		_ = mc.send(runMsg{Op: opSpawned, Seq: m.Seq, Error: err.Error(), Transient: worker.TransientStart(err)})
		return
	}
	run.Leaf = g.RunLeaf()
	if st, serr := kernfile.ReadProcStat(run.PID); serr == nil {
		run.StartTicks = boottime.StartTicks(st.StartTicks) // the initial time namespace's, as every agent reads it
	}
	r.mu.Lock()
	if hr, ok := r.held[run.ID]; ok {
		hr.run, hr.logr = run, logr
	} else {
		unix.Close(logr) // closed meanwhile
	}
	r.mu.Unlock()
	_ = mc.send(runMsg{Op: opSpawned, Seq: m.Seq, Run: &run})
}

// group returns the job cgroup at rel, loaded once while a run of it is
// held (the value removes the previous run's leaf when it starts the
// next). The load runs without mu, which the reaper's exited needs.
func (r *runs) group(rel string) (*cgroup.Group, error) {
	r.mu.Lock()
	g, ok := r.groups[rel]
	r.mu.Unlock()
	if ok {
		return g, nil
	}
	g, err := r.h.Load(rel)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if cached, ok := r.groups[rel]; ok {
		return cached, nil
	}
	r.groups[rel] = g
	return g, nil
}

// exited records run id's exit (called from the reaper: it must not
// block) and tells the agent, if one is connected.
func (r *runs) exited(id string, ws unix.WaitStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hr, ok := r.held[id]
	if !ok {
		return // forgotten (the agent killed a run it did not adopt), or closed
	}
	hr.exited, hr.status = true, ws
	if r.conn == nil && !r.closed {
		r.log.Info("guard: a run exited while no agent is connected; its status is kept for the next agent",
			"job_id", hr.run.JobID, "run", id, "pid", hr.run.PID, "exited", ws.Exited(), "code", ws.ExitStatus(), "signal", ws.Signal())
	}
	if r.conn != nil && !r.closed {
		mc := r.conn
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := mc.send(runMsg{Op: opExited, Run: &worker.Run{ID: id}, Exited: true, Status: uint32(ws)}); err != nil {
				// The agent does not read: it will count every run as
				// lost, and its next connection lists this exit.
				r.log.Warn("guard: tell the agent of an exit; closing its connection", "run", id, "error", err)
				mc.c.Close()
			}
		}()
	}
}

// forget drops run id's record and log pipe.
func (r *runs) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hr, ok := r.held[id]
	if !ok {
		return
	}
	if hr.logr >= 0 {
		unix.Close(hr.logr)
	}
	delete(r.held, id)
	for _, other := range r.held {
		if other.run.Cgroup == hr.run.Cgroup {
			return
		}
	}
	delete(r.groups, hr.run.Cgroup) // no run of the job held: its handle goes
}

// list sends every run held, each with its log pipe's read end, then
// opListed: batch runs to an opHeldBatch (an agent that asked for it),
// or one opHeld each (batch 0: an agent of a release before it).
//
// Each read end is sent as a copy (F_DUPFD_CLOEXEC) made under the lock,
// so that a forget meanwhile cannot close it under the send. The copies
// are made listBatch at a time and closed once sent: a guard holds one
// descriptor per run already, and copying all of them at once needed a
// second one per run, so that a guard within twice its runs of its
// RLIMIT_NOFILE (10,000 runs under a limit of 20,000) left the runs past
// the limit out of the list (EMFILE), and the next agent started those
// jobs again beside them. A run forgotten before its batch is copied is
// not sent (it is no longer held). A copy that fails all the same ends
// the connection without opListed, so that the agent sees a failed list,
// never a short one it would take for every run.
func (r *runs) list(mc *msgConn, batch int) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.held))
	for id, hr := range r.held {
		if hr.logr >= 0 {
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	for start := 0; start < len(ids); start += listBatch {
		copies, err := r.copyBatch(ids[start:min(start+listBatch, len(ids))])
		if err != nil {
			r.log.Warn("guard: copy a run's log pipe; ending the connection so that the agent lists again", "error", err)
			mc.c.Close()
			return
		}
		if !r.sendHeld(mc, copies, batch) {
			return
		}
	}
	if err := mc.send(runMsg{Op: opListed}); err != nil && !errors.Is(err, net.ErrClosed) {
		r.log.Warn("guard: end the list of runs", "error", err)
	}
}

// listBatch is how many log pipe read ends list copies at a time.
const listBatch = 64

// sendHeld sends copies, runs with a copy of their log pipe's read end,
// batch to an opHeldBatch, or one opHeld each when batch is 0, and closes
// the copies. It reports false when a send failed: the connection is
// broken, and the list ends there.
func (r *runs) sendHeld(mc *msgConn, copies []heldRun, batch int) bool {
	defer closeCopies(copies)
	if batch <= 0 {
		for _, hr := range copies {
			run := hr.run
			if err := mc.send(runMsg{Op: opHeld, Run: &run, Exited: hr.exited, Status: uint32(hr.status)}, hr.logr); err != nil {
				r.log.Warn("guard: hand a run to the agent", "run", run.ID, "error", err)
				return false
			}
		}
		return true
	}
	for start := 0; start < len(copies); start += batch {
		part := copies[start:min(start+batch, len(copies))]
		held := make([]heldEntry, len(part))
		fds := make([]int, len(part))
		for i, hr := range part {
			held[i] = heldEntry{Run: hr.run, Exited: hr.exited, Status: uint32(hr.status)}
			fds[i] = hr.logr
		}
		if err := mc.send(runMsg{Op: opHeldBatch, Held: held}, fds...); err != nil {
			r.log.Warn("guard: hand runs to the agent", "runs", len(part), "first", part[0].run.ID, "error", err)
			return false
		}
	}
	return true
}

// copyBatch returns the runs ids names that are still held, each with a
// copy of its log pipe's read end, made under the lock. Errors: a copy
// fails (EMFILE: the guard's RLIMIT_NOFILE); the copies made are closed.
func (r *runs) copyBatch(ids []string) ([]heldRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]heldRun, 0, len(ids))
	for _, id := range ids {
		hr, ok := r.held[id]
		if !ok || hr.logr < 0 {
			continue
		}
		c := *hr
		var err error
		if c.logr, err = unix.FcntlInt(uintptr(hr.logr), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			closeCopies(out)
			return nil, fmt.Errorf("copy the log pipe of run %s: %w", id, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// closeCopies closes the copied read ends of runs.
func closeCopies(runs []heldRun) {
	for _, hr := range runs {
		unix.Close(hr.logr)
	}
}
