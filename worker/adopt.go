package worker

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// marker writes the agent's "berth: ..." lines into a job's log.
type marker interface {
	mark(format string, args ...any)
}

// discardMarks is a marker for when no log is open yet.
type discardMarks struct{}

func (discardMarks) mark(string, ...any) {}

// spawnVia starts the run through the Runtime's Spawner (the lease guard,
// which stays the run's parent); step is held. The Spawner keeps a copy
// of the log pipe's read end for a later agent; logw is a write end of it,
// the run's stdout and stderr.
func (w *Worker) spawnVia(sp Spawner, logw *os.File, onExit func(unix.WaitStatus)) (*proc, error) {
	x, err := Resolve(&w.spec)
	if err != nil {
		return nil, err
	}
	rel := ""
	if g, ok := w.spec.Group.(interface{ Path() string }); ok {
		rel = g.Path()
	}
	restarts := w.Status().Restarts
	r, err := sp.Spawn(x, Run{JobID: w.spec.JobID, Cgroup: rel, Fingerprint: Fingerprint(&w.spec), StartedAt: w.started, Restarts: restarts},
		logw, w.logs.rfd, onExit)
	if err != nil {
		return nil, err
	}
	w.noteLeaf(r.Leaf)
	return &proc{pid: r.PID, runID: r.ID}, nil
}

// noteLeaf tells the job's cgroup which run leaf its processes live in
// (the Spawner made it): scrapes read that leaf alone.
func (w *Worker) noteLeaf(leaf string) {
	if g, ok := w.spec.Group.(interface{ SetRunLeaf(string) }); ok && leaf != "" {
		g.SetRunLeaf(leaf)
	}
}

// adopt is the first step of a worker whose job's run an earlier agent
// started (Runtime.Offer) with the same command: it reads on from the
// run's log pipe and waits for the run's exit as if it had started it,
// keeping its pid, start time and restart count. step is held.
func (w *Worker) adopt(a Adoptable) {
	sp := w.spec.Runtime.spawnerOf()
	if sp == nil {
		a.Logr.Close()
		w.killGroup(discardMarks{})
		w.fail(fmt.Errorf("adopt run %s of pid %d: no spawner", a.Run.ID, a.Run.PID))
		w.end()
		return
	}
	logs, err := w.openLog(a.Logr)
	if err != nil {
		// The run cannot be watched: it goes, and the worker starts anew.
		w.killGroup(discardMarks{})
		sp.Forget(a.Run)
		if logs, err = w.openLog(nil); err != nil {
			w.fail(err)
			w.end()
			return
		}
		w.logs = logs
		w.startRun(nil)
		return
	}
	w.logs = logs
	w.oomBefore, w.oomErr = w.spec.Group.OOMKills()
	w.started = a.Run.StartedAt
	w.noteLeaf(a.Run.Leaf)
	w.runs++
	n := w.runs
	p := &proc{pid: a.Run.PID, runID: a.Run.ID}
	w.run = p
	w.setState(func(s *Status) {
		s.State, s.PID, s.StartedAt, s.Restarts = Running, p.pid, a.Run.StartedAt, a.Run.Restarts
	})
	w.logs.mark("adopted pid %d (run %s) from an earlier agent", p.pid, a.Run.ID)
	sp.Adopt(a.Run, func(ws unix.WaitStatus) { go w.exited(n, ws) })
	if w.stopping {
		w.terminate(p)
	}
}

// forget tells the Spawner that run p's exit has been handled (its
// record and log pipe can go); step is held.
func (w *Worker) forget(p *proc) {
	if p.runID == "" {
		return
	}
	if sp := w.spec.Runtime.spawnerOf(); sp != nil {
		sp.Forget(Run{ID: p.runID})
	}
}
