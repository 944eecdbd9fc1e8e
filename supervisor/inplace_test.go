package supervisor

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
)

// TestRestartAndStopTimeoutApplyInPlace: changing a running job's restart
// policy and stop timeout (its own, or the [agent] stop_timeout it
// inherits) keeps its process (same PID), as systemd keeps a unit's
// process on daemon-reload when Restart= or TimeoutStopSec= change; the
// new policy decides its next exit; the log says the change was applied
// in place and never that limits were updated for it.
func TestRestartAndStopTimeoutApplyInPlace(t *testing.T) {
	var logs testutil.SyncBuffer
	fa := runFakeAgentWith(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	fa.src.assign(workloadOf(sleeper("a", limits.Limits{})))
	first := fa.waitJob(t, "a", "a running", running)

	// [agent] stop_timeout, which the job inherits: 1s → 3s on reload.
	body, err := os.ReadFile(fa.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fa.path, []byte(strings.Replace(string(body), `stop_timeout = "1s"`, `stop_timeout = "3s"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := fa.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "inherited stop timeout 3s in force", func() bool {
		fa.tbl.mu.RLock()
		defer fa.tbl.mu.RUnlock()
		j := fa.tbl.jobs["a"]
		return j != nil && j.spec.Process.StopTimeout == 3*time.Second
	})
	if j, _ := fa.Job("a"); j.PID != first.PID || j.State != worker.Running {
		t.Fatalf("[agent] stop_timeout change: state %s pid %d, want running pid %d (kept)", j.State, j.PID, first.PID)
	}

	changed := sleeper("a", limits.Limits{})
	changed.Run.Restart = spec.RestartAlways
	changed.Run.StopTimeout = 7 * time.Second
	fa.src.assign(workloadOf(changed))
	testutil.Eventually(t, 20*time.Second, "new restart policy and stop timeout in force", func() bool {
		fa.tbl.mu.RLock()
		defer fa.tbl.mu.RUnlock()
		j := fa.tbl.jobs["a"]
		return j != nil && j.spec.Process.Restart == spec.RestartAlways && j.spec.Process.StopTimeout == 7*time.Second
	})
	if j, _ := fa.Job("a"); j.PID != first.PID || j.State != worker.Running {
		t.Fatalf("restart/stop_timeout change: state %s pid %d, want running pid %d (kept)", j.State, j.PID, first.PID)
	}
	out := logs.String()
	if !strings.Contains(out, "restart and stop settings updated in place") {
		t.Errorf("no in-place line in the log:\n%s", out)
	}
	for _, bad := range []string{"job definition changed; restarting it", "job limits updated in place"} {
		if strings.Contains(out, bad) {
			t.Errorf("log says %q for a change applied in place:\n%s", bad, out)
		}
	}

	// The new policy (always) restarts the job when its process is killed.
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	fa.waitJob(t, "a", "a restarted by its new policy", func(j apiJobView) bool { return running(j) && j.PID != first.PID })
	if j, _ := fa.Job("a"); j.Restarts != 1 {
		t.Errorf("restarts %d, want 1 (the worker's own restart, not a new worker)", j.Restarts)
	}
}

// TestRefusedLimitReportedOthersApplied: lowering memory below the job's
// usage is refused by the kernel (cgroup v1: EBUSY from
// memory.limit_in_bytes, no swap to reclaim into); the job's other limit
// changes (pids) are still applied, the refusal is reported in the job's
// update_blocked (key, value, error) and in the metrics snapshot, logged
// once however many reconciles, and cleared once the kernel accepts it
// (the job freed its memory: the retry with backoff writes it); a later
// definition is then applied in place as any other.
func TestRefusedLimitReportedOthersApplied(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		t.Skip("needs the cgroup v1 memory controller (EBUSY on a limit below usage)")
	}
	if b, err := os.ReadFile("/proc/swaps"); err != nil || strings.Count(string(b), "\n") > 1 {
		t.Skip("needs a host without swap: with swap the kernel reclaims instead of refusing")
	}
	var logs testutil.SyncBuffer
	fa := runFakeAgentWith(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	hog := func(l limits.Limits) *spec.Workload {
		return workloadOf(spec.Connector{Name: "m", Run: &spec.Process{
			Command: []string{"/usr/bin/python3", "-c", "import signal, time\nb, freed = [], []\ndef free(*_):\n  freed.append(1)\n  b.clear()\nsignal.signal(signal.SIGUSR1, free)\nb.append(b'x' * (48 << 20))\nif freed: b.clear()\nwhile True: time.sleep(1000)"},
			Restart: spec.RestartNever, Limits: l}})
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 to hold anonymous memory")
	}
	fa.src.assign(hog(limits.Limits{Memory: 256 << 20, Pids: 100}))
	first := fa.waitJob(t, "m", "m running", running)
	// The job sets its SIGUSR1 handler before it allocates the 48 MiB, and
	// frees them after the allocation if the signal came during it: once
	// they are in use, SIGUSR1 frees them rather than killing the job.
	testutil.Eventually(t, 30*time.Second, "m uses 48MiB", func() bool {
		fa.tbl.mu.RLock()
		j := fa.tbl.jobs["m"]
		fa.tbl.mu.RUnlock()
		st, err := j.group.FullUsage()
		return err == nil && st.MemoryBytes >= 48<<20
	})
	pidsMax := filepath.Join("/sys/fs/cgroup/pids", fa.hier.Root(), "jobs", "m", "pids.max")
	pidsIs := func(want int) bool {
		b, err := os.ReadFile(pidsMax)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && n == want
	}
	memLimit := filepath.Join("/sys/fs/cgroup/memory", fa.hier.Root(), "jobs", "m", "memory.limit_in_bytes")
	memIs := func(want int) bool {
		b, err := os.ReadFile(memLimit)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && n == want
	}
	flagged := func() bool { return fa.updateBlocked("m") }

	fa.src.assign(hog(limits.Limits{Memory: 16 << 20, Pids: 50}))
	testutil.Eventually(t, 30*time.Second, "memory refusal reported", func() bool {
		j, _ := fa.Job("m")
		return strings.Contains(j.UpdateBlocked, "limit memory") && strings.Contains(j.UpdateBlocked, "device or resource busy")
	})
	if !pidsIs(50) {
		b, _ := os.ReadFile(pidsMax)
		t.Errorf("pids.max %q, want 50: the accepted limit was not applied beside the refused one", strings.TrimSpace(string(b)))
	}
	if j, _ := fa.Job("m"); j.PID != first.PID || j.State != worker.Running {
		t.Fatalf("state %s pid %d, want running pid %d", j.State, j.PID, first.PID)
	}
	if !flagged() {
		t.Error("the metrics snapshot does not flag the refused limit")
	}
	// Another reconcile with the same definition tries again, logs nothing new.
	for range 2 {
		fa.src.assign(hog(limits.Limits{Memory: 16 << 20, Pids: 50}))
		gen := fa.src.Desired().Generation
		testutil.Eventually(t, 30*time.Second, "reconciled", func() bool { return fa.View().Desired.Generation == gen })
	}
	if j, _ := fa.Job("m"); !strings.Contains(j.UpdateBlocked, "limit memory") {
		t.Errorf("mark lost on a later reconcile: %q", j.UpdateBlocked)
	}
	if n := strings.Count(logs.String(), "the kernel refused some job limits"); n != 1 {
		t.Errorf("%d refusal log lines, want 1:\n%s", n, logs.String())
	}

	// The job frees its memory: the next retry (with backoff) writes the
	// refused limit, which the kernel now accepts, and clears the mark.
	if err := syscall.Kill(first.PID, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "16MiB accepted once usage fell", func() bool {
		fa.clock.Advance(time.Minute)
		j, _ := fa.Job("m")
		return j.UpdateBlocked == "" && !flagged() && memIs(16<<20)
	})
	if !strings.Contains(logs.String(), "job limits accepted by the kernel now") {
		t.Errorf("no line for the refused limit accepted later:\n%s", logs.String())
	}

	// A later definition is applied in place as any other.
	fa.src.assign(hog(limits.Limits{Memory: 200 << 20, Pids: 50}))
	testutil.Eventually(t, 30*time.Second, "200MiB in force", func() bool { return memIs(200 << 20) })
	if j, _ := fa.Job("m"); j.UpdateBlocked != "" || flagged() || j.PID != first.PID {
		t.Errorf("after an accepted definition: update_blocked %q, flagged %v, pid %d (want %d)", j.UpdateBlocked, flagged(), j.PID, first.PID)
	}
}

// TestRemovedLimitsLiftedOnReload: a definition that drops its limits
// (memory, CPU quota and weight, pids) keeps its process (same PID) and
// its cgroup reads no limit from the kernel afterwards, as systemd leaves
// a unit after a property is removed and the unit reloaded; so does a
// sharing group's cgroup when the group's memory limit is removed.
func TestRemovedLimitsLiftedOnReload(t *testing.T) {
	fa := runFakeAgent(t)
	limited := limits.Limits{Memory: 64 << 20, CPU: 0.5, CPUWeight: 300, Pids: 50}
	wl := func(l, gl limits.Limits) *spec.Workload {
		a, b := sleeper("a", l), sleeper("b", limits.Limits{})
		b.Group = "g"
		return &spec.Workload{Groups: []spec.Group{{Name: "g", Limits: gl}}, Connectors: []spec.Connector{a, b}}
	}
	fa.src.assign(wl(limited, limits.Limits{Memory: 128 << 20}))
	first := fa.waitJob(t, "a", "a running", running)
	fa.waitJob(t, "b", "b running", running)
	// kernel reads the limits of the cgroup at rel from the kernel (a
	// group loaded anew: nothing berth wrote in this process is used).
	kernel := func(rel string) (cgroupLimits, bool) {
		g, err := fa.hier.Load(rel)
		if err != nil {
			return cgroupLimits{}, false
		}
		u, err := g.FullUsage()
		return cgroupLimits{u.Limits.MemoryLimitBytes, u.Limits.CPUQuotaCores, u.Limits.PidsLimit}, err == nil
	}
	if l, ok := kernel("jobs/a"); !ok || l != (cgroupLimits{64 << 20, 0.5, 50}) {
		t.Fatalf("limits before the reload %+v (%v)", l, ok)
	}
	if l, ok := kernel("groups/g"); !ok || l.memory != 128<<20 {
		t.Fatalf("group limits before the reload %+v (%v)", l, ok)
	}

	fa.src.assign(wl(limits.Limits{}, limits.Limits{}))
	testutil.Eventually(t, 20*time.Second, "no limit left in the kernel", func() bool {
		a, ok1 := kernel("jobs/a")
		g, ok2 := kernel("groups/g")
		return ok1 && ok2 && a == cgroupLimits{} && g == cgroupLimits{}
	})
	if j, _ := fa.Job("a"); j.PID != first.PID {
		t.Fatalf("removing the limits restarted the job: pid %d -> %d", first.PID, j.PID)
	}
}

// cgroupLimits are the limits Usage reads (0: none).
type cgroupLimits struct {
	memory uint64
	cpu    float64
	pids   uint64
}
