package worker

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// marker writes the agent's "berth: ..." lines into a job's log.
type marker interface {
	mark(format string, args ...any)
}

// discardMarks is a marker for when no log is open yet.
type discardMarks struct{}

func (discardMarks) mark(string, ...any) {}

// adopt is the first step of a worker made by Adopt: it reads on from
// the run's log pipe and waits for the run's exit as if it had started
// it, keeping its pid, start time and restart count. A run that cannot be
// watched (its log cannot be read) is killed and the job started anew.
// step is held.
func (w *Worker) adopt(a Adoptable) {
	sp := w.spec.Spawner
	if sp == nil {
		a.Logr.Close()
		killGroup(w.spec.Group, discardMarks{})
		w.fail(fmt.Errorf("adopt run %s of pid %d: no spawner", a.Run.ID, a.Run.PID))
		w.end()
		return
	}
	logs, err := w.spec.openLog(a.Logr)
	if err != nil {
		// The run cannot be watched: it goes, and the worker starts anew.
		killGroup(w.spec.Group, discardMarks{})
		sp.Forget(a.Run)
		if logs, err = w.spec.openLog(nil); err != nil {
			w.fail(err)
			w.end()
			return
		}
		w.logs = logs
		tok, err := w.spec.nextToken(w.life) // a rare path: with step held
		if err != nil {
			w.tokenWait(err)
			return
		}
		w.startRun(nil, tok)
		return
	}
	w.logs = logs
	w.oomBefore, w.oomErr = w.spec.Group.OOMKills()
	w.started = a.Run.StartedAt
	w.spec.noteLeaf(a.Run.Leaf)
	w.runs++
	n := w.runs
	p := &proc{pid: a.Run.PID, runID: a.Run.ID}
	w.run = p
	w.logs.mark("adopted pid %d (run %s) from an earlier agent", p.pid, a.Run.ID)
	sp.Adopt(a.Run, func(ws unix.WaitStatus) { go w.exited(n, ws) })
	if w.stopping {
		w.terminate(p)
	}
}
