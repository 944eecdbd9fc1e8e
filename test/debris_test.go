package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// debrisGoal is the most dying cgroups (nr_dying_descendants of
// cgroup.stat, Documentation/admin-guide/cgroup-v2.rst) the runs of
// crash-looping jobs may leave below the agent's cgroup root: issue 27
// item 8 (worker.TestCrashLoopCgroupDebris drives 10,000 restarts).
const debrisGoal = 100

// cgroup2Mount is the cgroup2 mount point: /sys/fs/cgroup on a unified
// host, /sys/fs/cgroup/unified on a hybrid one; "" when there is none.
func cgroup2Mount() string {
	for _, m := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(m, "cgroup.controllers")); err == nil {
			return m
		}
	}
	return ""
}

// statValue reads the value of key from a "key value" file (cgroup.stat,
// memory.stat); -1 when the file or the key is missing.
func statValue(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// readInt reads a file holding one integer (memory.current); -1 when it
// is missing or holds something else.
func readInt(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// TestCrashLoopCgroupDebris: the real agent restarting crash-looping jobs
// (each run appends a line to a file of its job, charging page cache, then
// exits 1; restart = "always", the default backoff of 1 s doubling) leaves
// at most debrisGoal dying cgroups below its cgroup root while the jobs
// wait out their backoff. The restarts are counted from GET /v1/jobs; the
// backoff (not configurable) bounds them to about five per job in 40 s, so
// the 10,000-restart figure comes from the worker package's test of the
// same name, which sets the backoff.
func TestCrashLoopCgroupDebris(t *testing.T) {
	mount := cgroup2Mount()
	if mount == "" {
		t.Skip("cgroup2 is not mounted (neither /sys/fs/cgroup nor /sys/fs/cgroup/unified): runs get no cgroup2 leaves, so none can die")
	}
	const jobs, per = 100, 5
	e := newEnv(t)
	runs := filepath.Join(e.dir, "runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		t.Fatal(err)
	}
	e.write(e.header("2s") + fmt.Sprintf(`
[static]

[[connector]]
name = "crash"
tasks = %d
  [connector.task]
  command = ["sh", "-c", "echo run >>%s/${BERTH_JOB_ID}.log; exit 1"]
  restart = "always"
`, jobs, runs))
	e.start()
	rootDir := filepath.Join(mount, e.root)
	restarts := 0
	peak := int64(0)
	testutil.Eventually(t, 3*time.Minute, fmt.Sprintf("%d restarts of each of %d jobs", per, jobs), func() bool {
		peak = max(peak, statValue(filepath.Join(rootDir, "cgroup.stat"), "nr_dying_descendants"))
		js := e.jobs()
		restarts = 0
		done := 0
		for _, j := range js {
			restarts += j.Restarts
			if j.Restarts >= per {
				done++
			}
		}
		return len(js) == jobs && done == jobs
	})
	// Every job now waits 32 s before its next run: wait for the dying
	// count to settle to the goal while no run is alive.
	var dying int64
	ok := testutil.Poll(30*time.Second, func() bool {
		dying = statValue(filepath.Join(rootDir, "cgroup.stat"), "nr_dying_descendants")
		return dying >= 0 && dying <= debrisGoal
	})
	t.Logf("%d restarts of %d jobs: dying cgroups below the root %d (peak %d), host-wide %d; root memory.current %d, percpu %d",
		restarts, jobs, dying, peak, statValue(filepath.Join(mount, "cgroup.stat"), "nr_dying_descendants"),
		readInt(filepath.Join(rootDir, "memory.current")), statValue(filepath.Join(rootDir, "memory.stat"), "percpu"))
	if !ok {
		t.Errorf("%d dying cgroups below %s after %d restarts, want at most %d", dying, rootDir, restarts, debrisGoal)
	}
}
