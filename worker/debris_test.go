package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/testutil"
	jobspec "github.com/berthd/berth/spec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// debrisGoal is the most dying cgroups (nr_dying_descendants of cgroup.stat,
// Documentation/admin-guide/cgroup-v2.rst) that the runs of crash-looping
// jobs may leave below berth's root once the last run has ended: issue 27
// item 8.
const debrisGoal = 100

// The size of TestCrashLoopCgroupDebris: restarts in all, and the most
// time it may spend driving them (2 min; 45 s in lane 1, BERTH_VM=1, so
// that the worker binary keeps within make test-v2's 300 s: qemu TCG made
// about 100 restarts a minute there). On a host too slow for the count
// within the budget it measures what it reached and says so.
var (
	debrisRestarts = flag.Int("debris.restarts", 10000, "restarts TestCrashLoopCgroupDebris drives over its crash-looping jobs")
	debrisBudget   = flag.Duration("debris.budget", debrisDefaultBudget(), "the most time TestCrashLoopCgroupDebris spends driving restarts")
)

func debrisDefaultBudget() time.Duration {
	if os.Getenv("BERTH_VM") == "1" {
		return 45 * time.Second
	}
	return 2 * time.Minute
}

// cgroupStat reads one counter of dir/cgroup.stat.
func cgroupStat(t *testing.T, dir, key string) int {
	t.Helper()
	v, ok := statKey(filepath.Join(dir, "cgroup.stat"), key)
	if !ok {
		t.Fatalf("%s/cgroup.stat has no %s", dir, key)
	}
	return int(v)
}

// statKey reads the value of key from a "key value" file (cgroup.stat,
// memory.stat); ok is false when the file or the key is missing.
func statKey(file, key string) (int64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, found := strings.Cut(line, " "); found && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// memoryHeld describes the memory charged below dir, as the kernel counts
// it: on cgroup v2 memory.current and memory.stat's percpu (the per-CPU
// counters of every memcg below, dying ones included), slab and file; "" when
// dir has no memory controller (a hybrid host's tracking tree).
func memoryHeld(dir string) string {
	cur, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return ""
	}
	s := "memory.current " + strings.TrimSpace(string(cur))
	for _, k := range []string{"percpu", "slab", "file"} {
		if v, ok := statKey(filepath.Join(dir, "memory.stat"), k); ok {
			s += fmt.Sprintf(" %s %d", k, v)
		}
	}
	return s
}

// dyingMemcgs is the count of memory cgroups of the host, dying ones
// included, from /proc/cgroups (num_cgroups of memory); -1 when unlisted.
func dyingMemcgs() int {
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "memory" {
			n, _ := strconv.Atoi(f[2])
			return n
		}
	}
	return -1
}

// TestCrashLoopCgroupDebris: after many restarts of crash-looping jobs
// (each run appends a line to a file of its own job, so that it charges page
// cache, then exits 1), the runs' cgroup2 leaves (cgroup.ForkInside) leave at
// most debrisGoal dying cgroups below berth's root once the last run has
// ended. The jobs run on the worker package's real Runtime, in real cgroups
// made by the cgroup package, exactly as the agent starts them; the count of
// restarts is -debris.restarts (10,000), driven for at most -debris.budget
// (2 min; about 37 s on the 2-core hybrid host). It logs the dying count and the memory charged
// below the root before and after.
func TestCrashLoopCgroupDebris(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if cgroup.DetectMode() == cgroup.Unavailable {
		t.Skip("no cgroup file system mounted")
	}
	total := *debrisRestarts
	const jobs = 50
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	root := testutil.TrackCgroupRoot(t, "berth-worker-test-debris-"+hex.EncodeToString(b))
	h, err := cgroup.Open(root)
	if err != nil {
		t.Fatalf("open cgroup hierarchy %s: %v", root, err)
	}
	if err := h.Prepare(); err != nil {
		t.Fatalf("prepare cgroup hierarchy %s: %v", root, err)
	}
	groups := make([]*cgroup.Group, jobs)
	for i := range groups {
		limit := int64(64 << 20)
		g, err := h.New(fmt.Sprintf("jobs/crash-%d", i), &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}})
		if err != nil {
			t.Fatalf("create job cgroup %d: %v", i, err)
		}
		groups[i] = g
	}
	ud := groups[0].Placement().UnifiedDir
	if ud == "" {
		t.Skip("no cgroup2 hierarchy mounted: runs get no leaves of their own, so none can die")
	}
	rootDir := filepath.Dir(filepath.Dir(ud))
	mount := strings.TrimSuffix(rootDir, "/"+root)
	dying0 := cgroupStat(t, rootDir, "nr_dying_descendants")
	hostDying0 := cgroupStat(t, mount, "nr_dying_descendants")
	memcgs0 := dyingMemcgs()
	sub, _ := os.ReadFile(filepath.Join(ud, "cgroup.subtree_control"))
	t.Logf("before: %d restarts over %d jobs; dying below root %d, host-wide %d; memory cgroups %d; %s; controllers of a run leaf %q",
		total, jobs, dying0, hostDying0, memcgs0, memoryHeld(rootDir), strings.TrimSpace(string(sub)))

	data := t.TempDir()
	workers := make([]*Worker, jobs)
	t0 := time.Now()
	for i, g := range groups {
		s := Spec{
			JobID:   fmt.Sprintf("crash-%d", i),
			Path:    "/bin/sh",
			Args:    []string{"sh", "-c", `echo "run $$" >>"$0"; exit 1`, filepath.Join(data, fmt.Sprintf("crash-%d.log", i))},
			Env:     []string{testPATH},
			Group:   g,
			Runtime: testRT,
			Restart: jobspec.RestartAlways,
			Backoff: Backoff{Initial: time.Millisecond, Max: time.Millisecond, Reset: time.Hour},
		}
		workers[i] = New(s)
		workers[i].Start()
	}
	stopAll := func() {
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(30*time.Second))
				defer cancel()
				if err := w.Stop(ctx); err != nil {
					t.Errorf("stop %s: %v", w.spec.JobID, err)
				}
			}()
		}
		wg.Wait()
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stopAll()
		}
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(30*time.Second))
		defer cancel()
		for _, g := range groups {
			if err := g.Kill(ctx); err != nil {
				t.Errorf("cleanup kill: %v", err)
			}
			if err := g.Delete(ctx); err != nil {
				t.Errorf("cleanup delete: %v", err)
			}
		}
		// TrackCgroupRoot's cleanup, which runs after this one, removes
		// <root>/jobs, <root>/groups and <root>.
	})
	restarts := func() int {
		n := 0
		for _, w := range workers {
			n += w.Status().Restarts
		}
		return n
	}
	// Drive the restarts, logging progress every tenth of them.
	// The budget is not stretched by testutil.Slack: it is the test's own
	// size, not a wait for a condition.
	peak, next := 0, total/10
	budget := time.NewTimer(*debrisBudget)
	defer budget.Stop()
	sample := time.NewTicker(20 * time.Millisecond)
	defer sample.Stop()
drive:
	for {
		n := restarts()
		dying := cgroupStat(t, rootDir, "nr_dying_descendants") - dying0
		peak = max(peak, dying)
		if n >= next {
			t.Logf("%s: %d restarts, dying below root %d, peak %d", time.Since(t0).Round(time.Second), n, dying, peak)
			next += total / 10
		}
		if n >= total {
			break
		}
		select {
		case <-budget.C:
			break drive
		case <-sample.C:
		}
	}
	stopAll()
	stopped = true
	elapsed := time.Since(t0)
	n := restarts()
	atStop := cgroupStat(t, rootDir, "nr_dying_descendants") - dying0
	memAtStop := memoryHeld(rootDir)
	dying := atStop
	// The kernel frees a removed cgroup once its last reference goes (an
	// RCU grace period for a cgroup without controllers; a memcg waits for
	// the pages charged to it): wait for that, not for a fixed time.
	ok := testutil.Poll(30*time.Second, func() bool {
		dying = cgroupStat(t, rootDir, "nr_dying_descendants") - dying0
		return dying <= debrisGoal
	})
	t.Logf("after %d restarts in %s (%.0f/s): dying below root %d at stop (peak while running %d), %d settled; host-wide %d; memory cgroups %d; at stop %s; settled %s",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), atStop, peak, dying,
		cgroupStat(t, mount, "nr_dying_descendants"), dyingMemcgs(), memAtStop, memoryHeld(rootDir))
	if !ok {
		t.Errorf("%d dying cgroups below %s after %d restarts of crash-looping jobs, want at most %d", dying, rootDir, n, debrisGoal)
	}
	if n < total {
		t.Logf("only %d of %d restarts within -debris.budget %s: this host is too slow for the full count", n, total, *debrisBudget)
	}
}
