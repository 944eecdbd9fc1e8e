package handover

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/berthd/berth/guard"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/supervisor/plan"
	"github.com/berthd/berth/worker"
	"golang.org/x/sys/unix"
)

// Inherited is everything an agent takes over from the earlier one on its
// data_dir, as Load found it at start.
type Inherited struct {
	// Jobs are the runs and restart waits of the earlier agent's jobs, by
	// job ID, for the first reconcile to adopt, resume or discard
	// (plan.Input.Inherited).
	Jobs plan.Inherited
	// Keep names the cgroups (relative to the cgroup root) of Jobs.Runs:
	// the start-up's clean-up of leftovers spares them
	// (cgroup.Hierarchy.CleanupExcept).
	Keep map[string]bool
	// Session is the session an earlier run of the agent saved, to resume
	// (source.Options.Resume); zero when there is none.
	Session source.SavedSession
	// SessionFile records the session for the agent after this one
	// (source.Options.Record).
	SessionFile *SessionFile
	// Notes records this agent's jobs waiting to restart for the agent
	// after it (worker.Spec.Notes); nil without a guard. Its owner closes
	// it (Notes.Close) when the agent ends.
	Notes *Notes
	// At is when the guard's runs were listed; Held how many it held
	// (GET /v1/agent's adoption).
	At   time.Time
	Held int
}

// Guard is what Load needs of the lease guard: *guard.Client.
type Guard interface {
	// Held lists the runs the guard holds (guard.Client.Held).
	Held(ctx context.Context) ([]guard.HeldRun, error)
	// Forget drops the guard's record of a run.
	Forget(run worker.Run)
	// PID is the guard's pid now, 0 when none runs.
	PID() int
}

var _ Guard = (*guard.Client)(nil)

// Options say where Load looks.
type Options struct {
	// DataDir is the agent's data_dir (agent.data_dir).
	DataDir string
	// Guard is the lease guard the agent connected to; nil: no guard (a
	// test's agent), so no run or restart wait is inherited or recorded.
	Guard Guard
	// Log receives what Load found; nil: slog.Default().
	Log *slog.Logger
}

// listTimeout bounds the listing of the guard's runs.
const listTimeout = 10 * time.Second

// Load reads what the agent inherits, once, at its start: the runs the
// guard holds, the restart waits written beside that guard and the saved
// session. Of the guard's runs, one per job is kept: the newest that
// still runs, else the newest (a second one is left by a crash between a
// run's end and its record's removal); the others are killed (a process
// of one is the guard's unreaped child, so its pid names it) and
// forgotten. A kept run that fails its identity check (HeldRun.Verify) is
// forgotten too: its cgroup, not in Keep, is then cleaned up with the
// other leftovers, which kills it. Load returns no error: a guard that
// cannot list its runs leaves nothing to adopt (every leftover is killed,
// as before live restart), and a restart wait or a session that cannot be
// read is not carried on; each is logged. It starts the Notes' writer
// (with a guard), which the caller closes.
func Load(ctx context.Context, opts Options) *Inherited {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	in := &Inherited{Jobs: plan.Inherited{Runs: map[string]worker.Adoptable{}, Waits: map[string]worker.Pending{}},
		Keep: map[string]bool{}, At: time.Now(), SessionFile: NewSessionFile(opts.DataDir)}
	in.Session = in.SessionFile.load(log)
	if opts.Guard == nil {
		return in
	}
	in.takeRuns(ctx, opts.Guard, log)
	var waits []worker.Pending
	in.Notes, waits = loadNotes(opts.DataDir, opts.Guard.PID, log)
	for _, p := range waits {
		in.Jobs.Waits[p.JobID] = p
	}
	return in
}

// takeRuns lists the runs g holds into in, one per job, each checked.
func (in *Inherited) takeRuns(ctx context.Context, g Guard, log *slog.Logger) {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	held, err := g.Held(lctx)
	if err != nil {
		log.Error("list the runs the lease guard holds: none adopted; every leftover is killed", "error", err)
		return
	}
	best := map[string]int{}
	for i, h := range held {
		j, ok := best[h.JobID]
		if !ok || newer(h, held[j]) {
			best[h.JobID] = i
		}
	}
	// The identity checks (each reads the run's /proc/PID/stat and
	// /proc/PID/cgroup) run one goroutine per CPU: at 5,000 runs they
	// were a fifth of a second of the adoption, one after another.
	verified := make([]error, len(held))
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(held); i += workers {
				if best[held[i].JobID] == i {
					verified[i] = held[i].Verify()
				}
			}
		})
	}
	wg.Wait()
	for i, h := range held {
		if best[h.JobID] != i {
			if !h.Exited && h.Verify() == nil {
				_ = unix.Kill(h.PID, unix.SIGKILL)
			}
			log.Warn("a second run of a job held by the lease guard: killed", "job_id", h.JobID, "run", h.ID, "pid", h.PID, "kept", held[best[h.JobID]].ID)
			h.Logr.Close()
			g.Forget(h.Run)
			continue
		}
		if err := verified[i]; err != nil {
			if errors.Is(err, guard.ErrElsewhere) {
				// The run's own process, where no clean-up of this
				// agent's cgroups reaches: killed by its pid, which the
				// guard has not reaped, so it names that process.
				_ = unix.Kill(h.PID, unix.SIGKILL)
				log.Warn("a run the lease guard holds lives outside its cgroup: killed", "job_id", h.JobID, "run", h.ID, "pid", h.PID, "error", err)
				h.Logr.Close()
				g.Forget(h.Run)
				continue
			}
			log.Warn("a run the lease guard holds fails its identity check: killed with the leftovers", "job_id", h.JobID, "run", h.ID, "error", err)
			h.Logr.Close()
			g.Forget(h.Run)
			continue
		}
		in.Jobs.Runs[h.JobID] = worker.Adoptable{Run: h.Run, Logr: h.Logr}
		in.Keep[h.Cgroup] = true
	}
	in.Held = len(held)
	if len(held) > 0 {
		log.Info("runs of an earlier agent held by the lease guard", "held", len(held), "adoptable", len(in.Jobs.Runs))
	}
}

// newer reports whether run a is to be kept over run b of the same job:
// one that runs over one that exited, then the later start.
func newer(a, b guard.HeldRun) bool {
	if a.Exited != b.Exited {
		return !a.Exited
	}
	return a.StartedAt.After(b.StartedAt)
}
