package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
	"github.com/jonboulle/clockwork"
)

// fakeAgent runs a real agent (real cgroups, real processes) on a fake
// source and a fake clock, so that reconcile decisions can be driven and
// retry timers advanced without sleeping.
type fakeAgent struct {
	*Agent
	src   *fakeSource
	clock *clockwork.FakeClock
	path  string
}

func runFakeAgent(t *testing.T) *fakeAgent { t.Helper(); return runFakeAgentWith(t, Options{}) }

// runFakeAgentWith is runFakeAgent with opts (its Source and Clock are the
// fake ones).
func runFakeAgentWith(t *testing.T, opts Options) *fakeAgent {
	t.Helper()
	return runFakeAgentPrepared(t, func(*config.Config, *cgroup.Hierarchy) Options { return opts })
}

// runFakeAgentPrepared is runFakeAgentWith with the options prepare
// returns once the agent's file and prepared hierarchy exist, before the
// agent starts.
func runFakeAgentPrepared(t *testing.T, prepare func(*config.Config, *cgroup.Hierarchy) Options) *fakeAgent {
	t.Helper()
	testutil.NeedRoot(t)
	dir := t.TempDir()
	root := testutil.TrackCgroupRoot(t, fmt.Sprintf("berth-sv-%s-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), time.Now().UnixNano()))
	path := filepath.Join(dir, "berth.toml")
	body := fmt.Sprintf("[agent]\nid = \"sv\"\ndata_dir = %q\nlog_dir = %q\nlisten = \"127.0.0.1:0\"\ncgroup_root = %q\nstop_timeout = \"1s\"\n",
		filepath.Join(dir, "data"), filepath.Join(dir, "log"), root)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, host.Local())
	if err != nil {
		t.Fatal(err)
	}
	hier, err := cgroup.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := hier.Prepare(); err != nil {
		t.Fatal(err)
	}
	rt, err := worker.StartRuntime()
	if err != nil {
		t.Fatal(err)
	}
	fa := &fakeAgent{src: newFakeSource(), clock: clockwork.NewFakeClock(), path: path}
	opts := prepare(cfg, hier)
	opts.Config, opts.Hierarchy, opts.Source, opts.Clock, opts.Runtime = cfg, hier, fa.src, fa.clock, rt
	fa.Agent = New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fa.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent stop: %v", err)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer rcancel()
		if err := hier.Remove(rctx); err != nil {
			t.Errorf("remove cgroup root: %v", err)
		}
		if err := rt.Close(); err != nil {
			t.Errorf("close the worker runtime: %v", err)
		}
	})
	return fa
}

// testJob is a job's view as the tests read it.
type testJob struct {
	State         worker.State
	PID, Restarts int
	Reason        string
	UpdateBlocked string
	Command       []string
	LastExit      *worker.Exit
}

// Job returns job id's view in the tests' shape.
func (fa *fakeAgent) Job(id string) (testJob, bool) {
	j, ok := fa.Agent.Job(id)
	return testJob{State: j.Status.State, PID: j.Status.PID, Restarts: j.Status.Restarts, Reason: j.Reason,
		UpdateBlocked: j.UpdateBlocked, Command: j.Spec.Process.Command, LastExit: j.Status.LastExit}, ok
}

// Reload reads the agent's file again and puts it in force (Apply), as the
// agent's wiring does on SIGHUP.
func (fa *fakeAgent) Reload(ctx context.Context) error {
	cfg, err := config.Load(fa.path, host.Local())
	if err != nil {
		return err
	}
	return fa.Apply(ctx, cfg)
}

// SetTarget stores a connector's target state in the fake store.
func (fa *fakeAgent) SetTarget(ctx context.Context, connector string, st spec.TargetState, by string) error {
	return fa.src.SetTarget(ctx, connector, cluster.Target{State: st, By: by, At: fa.clock.Now()})
}

// RequestRestarts stores restart requests in the fake store.
func (fa *fakeAgent) RequestRestarts(ctx context.Context, connector string, jobs []string, onlyFailed bool, by string) error {
	return fa.src.RequestRestarts(ctx, connector, jobs, onlyFailed, by)
}

// updateBlocked reports whether the agent's view flags job id's update as
// blocked (what berth_job_update_blocked reports).
func (fa *fakeAgent) updateBlocked(id string) bool {
	j, ok := fa.Agent.Job(id)
	return ok && j.UpdateBlocked != ""
}

// sleeper is a connector whose own job sleeps, with limits l.
func sleeper(name string, l limits.Limits, args ...string) spec.Connector {
	cmd := append([]string{"/bin/sleep", "1000"}, args...)
	return spec.Connector{Name: name, Run: &spec.Process{Command: cmd, Restart: spec.RestartNever, Limits: l}}
}

func workloadOf(cs ...spec.Connector) *spec.Workload { return &spec.Workload{Connectors: cs} }

// job returns the agent's view of job id, polling until cond holds.
func (fa *fakeAgent) waitJob(t *testing.T, id, what string, cond func(j apiJobView) bool) apiJobView {
	t.Helper()
	var last apiJobView
	testutil.Eventually(t, 20*time.Second, what, func() bool {
		j, ok := fa.Job(id)
		last = apiJobView{ok: ok, State: j.State, PID: j.PID, Reason: j.Reason}
		return cond(last)
	})
	return last
}

type apiJobView struct {
	ok     bool
	State  worker.State
	PID    int
	Reason string
}

func running(j apiJobView) bool { return j.ok && j.State == worker.Running && j.PID > 0 }

// TestLimitsOnlyChangeUpdatesInPlace: a definition whose limits alone
// change keeps its process (same PID) and the kernel holds the new limit;
// a changed command restarts it (a new PID).
func TestLimitsOnlyChangeUpdatesInPlace(t *testing.T) {
	fa := runFakeAgent(t)
	fa.src.assign(workloadOf(sleeper("a", limits.Limits{Memory: 64 << 20})))
	first := fa.waitJob(t, "a", "a running", running)

	fa.src.assign(workloadOf(sleeper("a", limits.Limits{Memory: 96 << 20})))
	testutil.Eventually(t, 20*time.Second, "memory limit 96MiB in the kernel", func() bool {
		g := fa.tbl.get("a")
		if g == nil || g.group == nil {
			return false
		}
		st, err := g.group.FullUsage()
		return err == nil && st.Limits.MemoryLimitBytes == 96<<20
	})
	if j, _ := fa.Job("a"); j.PID != first.PID {
		t.Fatalf("limits-only change restarted the job: pid %d -> %d", first.PID, j.PID)
	}

	fa.src.assign(workloadOf(sleeper("a", limits.Limits{Memory: 96 << 20}, "1")))
	fa.waitJob(t, "a", "a restarted with a new pid", func(j apiJobView) bool { return running(j) && j.PID != first.PID })
	if n := fa.src.count(fa.src.releases, "a"); n != 1 {
		t.Errorf("claim released %d times on restart, want 1 (only once its process was gone)", n)
	}
}

// TestPermanentStartErrorNotRetriedOnATimer: a limit the kernel refuses
// (pids above PID_MAX_LIMIT, here built without validation) fails the job
// with the reason and arms no retry; advancing the clock by an hour tries
// nothing again; a reload does.
func TestPermanentStartErrorNotRetriedOnATimer(t *testing.T) {
	fa := runFakeAgent(t)
	fa.src.assign(workloadOf(sleeper("bad", limits.Limits{Pids: 5_000_000})))
	j := fa.waitJob(t, "bad", "bad failed", func(j apiJobView) bool { return j.ok && j.State == worker.Failed })
	if !strings.Contains(j.Reason, "create cgroup") {
		t.Errorf("reason %q, want the cgroup error", j.Reason)
	}
	if _, pending := fa.tbl.nextRetry(); pending {
		t.Fatal("a permanent start error armed a retry timer")
	}
	claims := fa.src.count(fa.src.claims, "bad")
	fa.clock.Advance(time.Hour)
	// A later reconcile (another assignment) must not retry it either.
	fa.src.assign(workloadOf(sleeper("bad", limits.Limits{Pids: 5_000_000}), sleeper("ok", limits.Limits{})))
	fa.waitJob(t, "ok", "ok running", running)
	if n := fa.src.count(fa.src.claims, "bad"); n != claims {
		t.Fatalf("permanent failure tried again: %d claims, want %d", n, claims)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", fa.hier.Root(), "jobs", "bad")); err == nil {
		t.Error("a half-made cgroup of the failed job is left")
	}
	if err := fa.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := fa.src.count(fa.src.claims, "bad"); n != claims+1 {
		t.Errorf("reload did not try the failed job again: %d claims, want %d", n, claims+1)
	}
}

// TestTransientClaimErrorRetriedWithBackoff: a store error on claim leaves
// the job waiting with a retry armed; when the clock passes the backoff
// the claim is tried again, and once the store answers the job runs.
func TestTransientClaimErrorRetriedWithBackoff(t *testing.T) {
	fa := runFakeAgent(t)
	fa.src.set(func(f *fakeSource) { f.claimErr = fmt.Errorf("etcd unreachable") })
	fa.src.assign(workloadOf(sleeper("t", limits.Limits{})))
	fa.waitJob(t, "t", "t waiting", func(j apiJobView) bool { return j.ok && j.State == worker.Waiting })
	if d, pending := fa.tbl.nextRetry(); !pending || d > 2*time.Second {
		t.Fatalf("retry pending %v in %v, want one within the claim backoff (≤ 2 s)", pending, d)
	}
	fa.src.set(func(f *fakeSource) { f.claimErr = nil })
	testutil.Eventually(t, 20*time.Second, "the claim retried and t running", func() bool {
		fa.clock.Advance(2 * time.Second)
		j, ok := fa.Job("t")
		return ok && j.State == worker.Running
	})
}

// TestFailedReleaseRetriedWithBackoff: a stopped job whose release the
// store refuses is released again with backoff, once the store answers,
// and then no more: the member the job moved to does not wait on a claim
// this agent no longer runs for as long as its session lives
// (test/releaseretry_test.go is the same on real etcd and agents).
func TestFailedReleaseRetriedWithBackoff(t *testing.T) {
	fa := runFakeAgent(t)
	fa.src.assign(workloadOf(sleeper("r", limits.Limits{})))
	fa.waitJob(t, "r", "r running", running)
	fa.src.set(func(f *fakeSource) { f.relErr = fmt.Errorf("etcd unreachable") })
	fa.src.assign(workloadOf())
	fa.waitJob(t, "r", "r gone", func(j apiJobView) bool { return !j.ok })
	testutil.Eventually(t, 10*time.Second, "the release tried", func() bool { return fa.src.count(fa.src.releases, "r") >= 1 })
	if d, pending := fa.tbl.nextRetry(); !pending || d > 2*time.Second {
		t.Fatalf("retry pending %v in %v, want one within the claim backoff (≤ 2 s)", pending, d)
	}
	fa.src.set(func(f *fakeSource) { f.relErr = nil })
	var n int
	testutil.Eventually(t, 20*time.Second, "the release retried once the store answers", func() bool {
		fa.clock.Advance(2 * time.Second)
		n = fa.src.count(fa.src.releases, "r")
		_, pending := fa.tbl.nextRetry()
		return n >= 2 && !pending
	})
	fa.clock.Advance(time.Hour)
	fa.src.assign(workloadOf(sleeper("other", limits.Limits{})))
	fa.waitJob(t, "other", "other running", running)
	if m := fa.src.count(fa.src.releases, "r"); m != n {
		t.Errorf("released %d times after it succeeded, want no more (%d)", m, n)
	}
}

// TestUnsureClaimReleasedWhenJobGoes: a job whose claim call failed (the
// store may have written the claim all the same) waits; when it is no
// longer assigned here its claim is released, lest a claim this session
// may hold be left behind.
func TestUnsureClaimReleasedWhenJobGoes(t *testing.T) {
	fa := runFakeAgent(t)
	fa.src.set(func(f *fakeSource) { f.claimErr = fmt.Errorf("context deadline exceeded") })
	fa.src.assign(workloadOf(sleeper("u", limits.Limits{})))
	fa.waitJob(t, "u", "u waiting", func(j apiJobView) bool { return j.ok && j.State == worker.Waiting })
	fa.src.set(func(f *fakeSource) { f.claimErr = nil })
	fa.src.assign(workloadOf())
	fa.waitJob(t, "u", "u gone", func(j apiJobView) bool { return !j.ok })
	testutil.Eventually(t, 10*time.Second, "u's claim released", func() bool { return fa.src.count(fa.src.releases, "u") == 1 })
}

// TestFenceKillsEverythingAndKeepsClaims: a loss of membership the source
// delivers (Lost) makes the agent kill every worker at once and forget
// every job, without releasing any claim (the claims go with the lost
// lease), and only then tell the source it may join again (Fenced).
func TestFenceKillsEverythingAndKeepsClaims(t *testing.T) {
	fa := runFakeAgent(t)
	fa.src.assign(workloadOf(sleeper("f1", limits.Limits{}), sleeper("f2", limits.Limits{})))
	j1 := fa.waitJob(t, "f1", "f1 running", running)
	j2 := fa.waitJob(t, "f2", "f2 running", running)
	loss := source.NewLoss("sv", time.Now(), 10*time.Second, errors.New("lease expired"))
	select {
	case fa.src.lost <- loss:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent does not receive losses of membership")
	}
	select {
	case <-loss.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not report the fencing done")
	}
	for _, pid := range []int{j1.PID, j2.PID} {
		if testutil.Alive(pid) {
			t.Errorf("pid %d alive after fencing", pid)
		}
	}
	if js := fa.View().Jobs; len(js) != 0 {
		t.Errorf("jobs after fencing: %+v", js)
	}
	if n := fa.src.count(fa.src.releases, "f1") + fa.src.count(fa.src.releases, "f2"); n != 0 {
		t.Errorf("fencing released %d claims; they must go with the lease", n)
	}
}
