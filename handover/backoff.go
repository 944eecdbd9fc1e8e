package handover

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/berthd/berth/internal/atomicfile"
	"github.com/berthd/berth/internal/boottime"
	"github.com/berthd/berth/internal/kernfile"
	"github.com/berthd/berth/worker"
)

// BackoffFile is <data_dir>/backoff: the jobs of the running agent that
// wait to restart (backoff after an exit, no run), with their restart
// counts and when each restart is due, so that the agent's next run
// carries the backoff on instead of starting a crash-looping job anew at
// once (docs/live-restart.md). It names the lease guard it was written
// beside: only an agent that finds the same guard process (the runs were
// handed over) uses it. It is removed on a clean stop.
func BackoffFile(dataDir string) string { return filepath.Join(dataDir, "backoff") }

// savedBackoff is the file's content.
type savedBackoff struct {
	// GuardPID and GuardStart (clock ticks after boot, /proc/PID/stat
	// field 22) name the guard that held the runs when it was written.
	GuardPID   int         `json:"guard_pid"`
	GuardStart uint64      `json:"guard_start"`
	Jobs       []savedWait `json:"jobs"`
}

// savedWait is one job's wait; Due is the restart's time on
// CLOCK_BOOTTIME (ns), which every process shares and the wall clock's
// jumps do not move.
type savedWait struct {
	worker.Pending
	Due int64 `json:"due_boottime_ns"`
}

// Notes is the agent's worker.BackoffNotes: it keeps each waiting job's
// note and writes them all to BackoffFile from a goroutine of its own
// (atomicfile.WriteFile: a crash leaves the old file or the new), never in
// a worker's step. A nil *Notes records nothing.
type Notes struct {
	path  string
	guard func() int // the guard's pid now (0: none)
	log   *slog.Logger

	saveMu sync.Mutex // one save at a time
	mu     sync.Mutex
	jobs   map[string]worker.Pending
	dirty  bool
	kick   chan struct{}
	quit   chan struct{}
	done   chan struct{}
}

var _ worker.BackoffNotes = (*Notes)(nil)

// loadNotes reads the waits an earlier agent left in dataDir's
// BackoffFile, if the guard it names is the one of pid now (a different
// guard, or none, means the jobs were not handed over: they start anew),
// and starts the notes of this agent. The earlier waits stay in the file
// until their jobs' workers note them again or the first reconcile
// discards them (Done).
func loadNotes(dataDir string, guardPID func() int, log *slog.Logger) (*Notes, []worker.Pending) {
	n := &Notes{path: BackoffFile(dataDir), guard: guardPID, log: log, jobs: map[string]worker.Pending{},
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	var out []worker.Pending
	b, err := os.ReadFile(n.path)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		log.Warn("read the restart waits of an earlier agent: none carried on", "file", n.path, "error", err)
	default:
		var s savedBackoff
		pid := guardPID()
		if err := json.Unmarshal(b, &s); err != nil {
			log.Warn("read the restart waits of an earlier agent: none carried on", "file", n.path, "error", err)
			break
		}
		if pid == 0 || s.GuardPID != pid || startTicks(pid) != s.GuardStart {
			log.Info("the restart waits of an earlier agent name another lease guard: none carried on", "file", n.path,
				"guard_pid", s.GuardPID, "jobs", len(s.Jobs))
			break
		}
		now := boottime.Now()
		for _, w := range s.Jobs {
			p := w.Pending
			p.NextRestart = time.Now().Add(time.Duration(w.Due - now))
			out = append(out, p)
			n.jobs[p.JobID] = p
		}
		if len(out) > 0 {
			log.Info("restart waits of an earlier agent carried on", "jobs", len(out))
		}
	}
	n.dirty = true // rewritten with this guard's identity
	go n.write()
	n.kickWrite()
	return n, out
}

// Waiting records p (worker.BackoffNotes). Nil notes ignore it.
func (n *Notes) Waiting(p worker.Pending) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.jobs[p.JobID] = p
	n.dirty = true
	n.mu.Unlock()
	n.kickWrite()
}

// Done drops jobID's note (worker.BackoffNotes). Nil notes ignore it.
func (n *Notes) Done(jobID string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	_, ok := n.jobs[jobID]
	delete(n.jobs, jobID)
	n.dirty = n.dirty || ok
	n.mu.Unlock()
	if ok {
		n.kickWrite()
	}
}

func (n *Notes) kickWrite() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// write saves the notes at every kick until close.
func (n *Notes) write() {
	defer close(n.done)
	for {
		select {
		case <-n.quit:
			return
		case <-n.kick:
		}
		if err := n.Flush(); err != nil {
			n.log.Warn("save the restart waits for the next agent", "error", err)
		}
	}
}

// save writes the notes if they changed since the last save. Errors: the
// file cannot be written, synced or renamed.
func (n *Notes) save() error {
	n.mu.Lock()
	if !n.dirty {
		n.mu.Unlock()
		return nil
	}
	n.dirty = false
	now := boottime.Now()
	s := savedBackoff{Jobs: make([]savedWait, 0, len(n.jobs))}
	for _, p := range n.jobs {
		s.Jobs = append(s.Jobs, savedWait{Pending: p, Due: now + int64(time.Until(p.NextRestart))})
	}
	n.mu.Unlock()
	if s.GuardPID = n.guard(); s.GuardPID != 0 {
		s.GuardStart = startTicks(s.GuardPID)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("save %s: %w", n.path, err)
	}
	if err := atomicfile.WriteFile(n.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save the restart waits: %w", err)
	}
	return nil
}

// Flush saves the notes now (nil notes: nothing): berth upgrade does
// before the exec, which ends the writer's goroutine with the old image.
// Errors: the file cannot be written.
func (n *Notes) Flush() error {
	if n == nil {
		return nil
	}
	n.saveMu.Lock()
	defer n.saveMu.Unlock()
	return n.save()
}

// Close stops the writer after a last save; with remove, the file goes
// (a clean stop: no job waits for a next agent). Nil notes: nothing.
func (n *Notes) Close(remove bool) {
	if n == nil {
		return
	}
	close(n.quit)
	<-n.done
	if remove {
		_ = os.Remove(n.path)
		return
	}
	if err := n.Flush(); err != nil {
		n.log.Warn("save the restart waits for the next agent", "error", err)
	}
}

// startTicks is pid's start time, clock ticks after boot (/proc/PID/stat
// field 22); 0 when it cannot be read.
func startTicks(pid int) uint64 {
	st, err := kernfile.ReadProcStat(pid)
	if err != nil {
		return 0
	}
	return boottime.StartTicks(st.StartTicks) // one domain for agents in any time namespace
}
