package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
)

// cgroupGone reports whether job id's cgroup exists in no hierarchy.
func (fa *fakeAgent) cgroupGone(id string) bool {
	for _, d := range []string{"pids", "memory", "unified", ""} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", d, fa.hier.Root(), "jobs", id)); err == nil {
			return false
		}
	}
	return true
}

// A paused connector's job gives everything up — process, cgroup, claim —
// and shows paused with who asked; resume starts it again with a new
// claim; stop holds it as stopped.
func TestPauseFreesResourcesAndResumeRestarts(t *testing.T) {
	fa := runFakeAgent(t)
	fa.src.assign(workloadOf(sleeper("p", limits.Limits{Memory: 32 << 20})))
	first := fa.waitJob(t, "p", "p running", running)

	if err := fa.SetTarget(context.Background(), "p", spec.TargetPaused, "test"); err != nil {
		t.Fatal(err)
	}
	j := fa.waitJob(t, "p", "p paused", func(j apiJobView) bool { return j.ok && j.State == worker.Paused })
	if testutil.Alive(first.PID) {
		t.Errorf("paused job's process %d alive", first.PID)
	}
	if !fa.cgroupGone("p") {
		t.Error("paused job's cgroup left")
	}
	if n := fa.src.count(fa.src.releases, "p"); n != 1 {
		t.Errorf("claim released %d times on pause, want 1", n)
	}
	if j.Reason == "" || !strings.Contains(j.Reason, "paused by test") {
		t.Errorf("reason %q, want who paused it", j.Reason)
	}
	claims := fa.src.count(fa.src.claims, "p")

	if err := fa.SetTarget(context.Background(), "p", spec.TargetRunning, "test"); err != nil {
		t.Fatal(err)
	}
	fa.waitJob(t, "p", "p running again", func(j apiJobView) bool { return running(j) && j.PID != first.PID })
	if n := fa.src.count(fa.src.claims, "p"); n != claims+1 {
		t.Errorf("resume claimed %d times, want 1", n-claims)
	}

	if err := fa.SetTarget(context.Background(), "p", spec.TargetStopped, "test"); err != nil {
		t.Fatal(err)
	}
	fa.waitJob(t, "p", "p stopped", func(j apiJobView) bool {
		return j.ok && j.State == worker.Stopped && strings.Contains(j.Reason, "stopped by test")
	})
	if !fa.cgroupGone("p") {
		t.Error("stopped job's cgroup left")
	}
}

// A restart request restarts its job once — a new process, the claim
// released and taken again — and touches no other job; the request is
// removed from the store once; a second pass does not restart it again.
func TestRestartRequestCarriedOutOnce(t *testing.T) {
	fa := runFakeAgent(t)
	fa.src.assign(workloadOf(sleeper("r", limits.Limits{}), sleeper("other", limits.Limits{})))
	r := fa.waitJob(t, "r", "r running", running)
	other := fa.waitJob(t, "other", "other running", running)

	if err := fa.RequestRestarts(context.Background(), "r", []string{"r"}, false, "test"); err != nil {
		t.Fatal(err)
	}
	fa.waitJob(t, "r", "r restarted", func(j apiJobView) bool { return running(j) && j.PID != r.PID })
	testutil.Eventually(t, 10*time.Second, "the request removed", func() bool { return fa.src.count(fa.src.done, "r") == 1 })
	if j, _ := fa.Job("other"); j.PID != other.PID {
		t.Errorf("restart of r restarted other: pid %d -> %d", other.PID, j.PID)
	}
	if n := fa.src.count(fa.src.releases, "r"); n != 1 {
		t.Errorf("claim of r released %d times, want 1", n)
	}
	after, _ := fa.Job("r")
	fa.src.assign(workloadOf(sleeper("r", limits.Limits{}), sleeper("other", limits.Limits{})))
	fa.waitJob(t, "other", "other still running", running)
	if j, _ := fa.Job("r"); j.PID != after.PID {
		t.Errorf("a later pass restarted r again: pid %d -> %d", after.PID, j.PID)
	}
}

// onlyFailed restarts a job only when it is FAILED when its agent handles
// the request: a running job keeps its process; a job whose program
// exited 3 (restart = never) runs again; the request of a paused job is
// dropped.
func TestRestartOnlyFailed(t *testing.T) {
	fa := runFakeAgent(t)
	dead := spec.Connector{Name: "dead", Run: &spec.Process{Command: []string{"/bin/sh", "-c", "exit 3"}, Restart: spec.RestartNever}}
	fa.src.assign(workloadOf(sleeper("alive", limits.Limits{}), dead))
	alive := fa.waitJob(t, "alive", "alive running", running)
	fa.waitJob(t, "dead", "dead exited", func(j apiJobView) bool { return j.ok && j.State == worker.Exited })
	d0, _ := fa.Job("dead")
	if d0.LastExit == nil || !strings.Contains(d0.LastExit.Reason, "exited 3") {
		t.Errorf("dead's last exit %+v, want its exit 3", d0.LastExit)
	}

	for _, c := range []string{"alive", "dead"} {
		if err := fa.RequestRestarts(context.Background(), c, []string{c}, true, "test"); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 20*time.Second, "both requests handled", func() bool {
		return fa.src.count(fa.src.done, "alive") == 1 && fa.src.count(fa.src.done, "dead") == 1
	})
	if j, _ := fa.Job("alive"); j.PID != alive.PID {
		t.Errorf("onlyFailed restarted a running job: pid %d -> %d", alive.PID, j.PID)
	}
	testutil.Eventually(t, 20*time.Second, "dead ran again", func() bool {
		j, ok := fa.Job("dead")
		return ok && j.LastExit != nil && j.LastExit.Time.After(d0.LastExit.Time)
	})

	// A paused connector's restart request is handled without a restart.
	if err := fa.SetTarget(context.Background(), "alive", spec.TargetPaused, "test"); err != nil {
		t.Fatal(err)
	}
	fa.waitJob(t, "alive", "alive paused", func(j apiJobView) bool { return j.ok && j.State == worker.Paused })
	if err := fa.RequestRestarts(context.Background(), "alive", []string{"alive"}, false, "test"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the paused job's request dropped", func() bool { return fa.src.count(fa.src.done, "alive") == 2 })
	if j, _ := fa.Job("alive"); j.State != worker.Paused {
		t.Errorf("a restart request ran a paused job: %s", j.State)
	}
}

// A restart whose request cannot be removed from the store (the store is
// away) is not carried out again on later passes: the agent remembers the
// request's revision and only retries the removal.
func TestRestartNotRepeatedWhenItsRemovalFails(t *testing.T) {
	fa := runFakeAgent(t)
	wl := workloadOf(sleeper("r", limits.Limits{}))
	fa.src.assign(wl)
	first := fa.waitJob(t, "r", "r running", running)
	fa.src.set(func(f *fakeSource) { f.doneErr = errors.New("etcd unreachable") })
	if err := fa.RequestRestarts(context.Background(), "r", []string{"r"}, false, "test"); err != nil {
		t.Fatal(err)
	}
	second := fa.waitJob(t, "r", "r restarted", func(j apiJobView) bool { return running(j) && j.PID != first.PID })
	testutil.Eventually(t, 10*time.Second, "a removal tried", func() bool { return fa.src.count(fa.src.done, "r") >= 1 })
	tries := fa.src.count(fa.src.done, "r")
	fa.src.assign(wl) // another pass, the request still pending
	testutil.Eventually(t, 10*time.Second, "the removal tried again", func() bool { return fa.src.count(fa.src.done, "r") > tries })
	if j, _ := fa.Job("r"); j.PID != second.PID {
		t.Fatalf("the restart was carried out again: pid %d -> %d", second.PID, j.PID)
	}
	fa.src.set(func(f *fakeSource) { f.doneErr = nil })
	fa.src.assign(wl)
	testutil.Eventually(t, 10*time.Second, "the request removed", func() bool {
		return len(fa.src.Desired().Restarts) == 0
	})
	if j, _ := fa.Job("r"); j.PID != second.PID {
		t.Errorf("the restart was carried out again: pid %d -> %d", second.PID, j.PID)
	}
}
