package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/fencing"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/supervisor/plan"
	"github.com/berthd/berth/worker"
)

// doneNotes is a worker.BackoffNotes that records the jobs whose notes
// were dropped.
type doneNotes struct {
	mu   sync.Mutex
	done []string
}

func (n *doneNotes) Waiting(worker.Pending) {}
func (n *doneNotes) Done(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.done = append(n.done, id)
}

func (n *doneNotes) dropped() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Sorted(slices.Values(n.done))
}

// leftRun starts a process in job id's cgroup under h, as an earlier
// agent's run left there, and returns it as inherited with the read end
// of a pipe for its log.
func leftRun(t *testing.T, h *cgroup.Hierarchy, id string) (worker.Adoptable, *exec.Cmd) {
	t.Helper()
	g, err := h.New(cgroup.JobRel(id, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	p := g.Placement()
	files := p.ProcsFiles
	if p.UnifiedDir != "" {
		files = append(files, filepath.Join(p.UnifiedDir, "cgroup.procs"))
	}
	for _, f := range files {
		if err := os.WriteFile(f, []byte(fmt.Sprint(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	t.Cleanup(func() { _ = r.Close() })
	return worker.Adoptable{Run: worker.Run{ID: "r-" + id, JobID: id, Cgroup: cgroup.JobRel(id, ""), PID: cmd.Process.Pid, Fingerprint: "an earlier command"}, Logr: r}, cmd
}

// The first pass with the whole assignment decides what an earlier agent
// left, once: a run of a job no longer assigned is killed with its cgroup
// (its log pipe closed), a run of a job whose command changed is killed
// and the job starts anew (the job's wait beside it dropped: the run
// wins), a wait of the same command is resumed (the restart count and due
// time carried over); nothing is adopted without a run of the job's
// command. Before that pass (no assignment yet) nothing is touched.
func TestFirstPassDecidesWhatWasInherited(t *testing.T) {
	waiter := sleeper("waiter", limits.Limits{})
	waiter.Run.Restart = spec.RestartAlways
	changed := sleeper("changed", limits.Limits{})
	wl := workloadOf(waiter, changed)
	notes := &doneNotes{}
	due := time.Now().Add(time.Hour)
	var gone, stale worker.Adoptable
	var goneCmd *exec.Cmd
	fa := runFakeAgentPrepared(t, func(cfg *config.Config, h *cgroup.Hierarchy) Options {
		gone, goneCmd = leftRun(t, h, "gone")
		stale, _ = leftRun(t, h, "changed")
		// The waiter's fingerprint is the one its worker would have.
		e := &executor{hier: h, log: slog.Default()}
		js := wanted(source.Desired{Generation: 1, Jobs: []string{"waiter"}, Workload: wl}, cfg.Agent.ProcessDefaults())
		return Options{Notes: notes, Inherited: plan.Inherited{
			Runs: map[string]worker.Adoptable{"gone": gone, "changed": stale},
			Waits: map[string]worker.Pending{
				"waiter": {JobID: "waiter", Fingerprint: e.fingerprint(cfg, js["waiter"]), Restarts: 3, Delay: time.Minute, NextRestart: due,
					LastExit: &worker.Exit{Code: 1, Reason: "exited 1"}},
				"changed": {JobID: "changed", Fingerprint: "an earlier command", Restarts: 9},
			}}}
	})
	if !testutil.Alive(goneCmd.Process.Pid) || fa.cgroupGone("gone") {
		t.Fatal("a run was discarded before the assignment was known")
	}

	fa.src.assign(wl)
	testutil.Eventually(t, 20*time.Second, "the run of gone killed, its cgroup removed", func() bool {
		return !testutil.Alive(goneCmd.Process.Pid) && fa.cgroupGone("gone")
	})
	if _, err := gone.Logr.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the log pipe of the discarded run is open: %v", err)
	}
	c := fa.waitJob(t, "changed", "changed running anew", running)
	if c.PID == stale.Run.PID || testutil.Alive(stale.Run.PID) {
		t.Errorf("changed runs pid %d, the earlier run was %d (alive %v): not started anew", c.PID, stale.Run.PID, testutil.Alive(stale.Run.PID))
	}
	if j, _ := fa.Job("changed"); j.Restarts != 0 {
		t.Errorf("changed: %d restarts, want 0 (its wait was of another command)", j.Restarts)
	}
	fa.waitJob(t, "waiter", "waiter backing off", func(j apiJobView) bool { return j.ok && j.State == worker.BackingOff })
	w, _ := fa.Agent.Job("waiter")
	if w.Status.Restarts != 3 || w.Status.NextRestart.Sub(due).Abs() > time.Millisecond {
		t.Errorf("waiter: %d restarts, next restart %v, want 3 and %v carried over", w.Status.Restarts, w.Status.NextRestart, due)
	}
	if got := notes.dropped(); !slices.Equal(got, []string{"changed"}) {
		t.Errorf("dropped notes %v, want changed's", got)
	}
	if n := fa.Adopted(); n != 0 {
		t.Errorf("adopted %d, want 0", n)
	}
	if fa.exec.inheriting() {
		t.Error("the inheritance is still to be handed over after the first complete pass")
	}
}

// A run an earlier agent left whose fencing token is older than its job's
// claim (the claim was made anew after the run started: another member
// may have run the job meanwhile) is not adopted: it is killed and the
// job starts anew with a token of the claim, written to the record.
func TestRunOlderThanItsClaimStartsAnew(t *testing.T) {
	wl := workloadOf(sleeper("old", limits.Limits{}))
	record, err := fencing.OpenRecord(fencing.RecordPath(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	var left worker.Adoptable
	var leftCmd *exec.Cmd
	fa := runFakeAgentPrepared(t, func(cfg *config.Config, h *cgroup.Hierarchy) Options {
		left, leftCmd = leftRun(t, h, "old")
		e := &executor{hier: h, log: slog.Default()}
		js := wanted(source.Desired{Generation: 1, Jobs: []string{"old"}, Workload: wl}, cfg.Agent.ProcessDefaults())
		left.Run.Fingerprint, left.Run.Token = e.fingerprint(cfg, js["old"]), 5
		return Options{Tokens: record, Inherited: plan.Inherited{Runs: map[string]worker.Adoptable{"old": left}}}
	})
	fa.src.set(func(f *fakeSource) { f.rev = 10 }) // the claim is made at 11
	fa.src.assign(wl)
	j := fa.waitJob(t, "old", "old running anew", running)
	if j.PID == left.Run.PID || testutil.Alive(leftCmd.Process.Pid) {
		t.Fatalf("old runs pid %d, the earlier run %d (alive %v): not started anew", j.PID, left.Run.PID, testutil.Alive(leftCmd.Process.Pid))
	}
	if v, _ := fa.Agent.Job("old"); v.Status.Token != 11 || record.Highest("old") != 11 {
		t.Errorf("the new run's token %d, recorded %d; want 11, the claim's", v.Status.Token, record.Highest("old"))
	}
	if n := fa.Adopted(); n != 0 {
		t.Errorf("adopted %d, want 0", n)
	}
}
