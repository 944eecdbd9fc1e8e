package test

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/fencing"
	"github.com/berthd/berth/internal/testutil"
)

// hostStallJobs are three jobs that restart after any exit, on an agent
// whose session lasts 2 s: a stall of a few seconds outlives it.
const hostStallJobs = `
[cluster]
session_ttl = "2s"

[static]
connectors = ["s0", "s1", "s2"]

[[connector]]
name = "s0"
  [connector.run]
  command = ["sleep", "1000"]
  restart = "always"

[[connector]]
name = "s1"
  [connector.run]
  command = ["sleep", "1001"]
  restart = "always"

[[connector]]
name = "s2"
  [connector.run]
  command = ["sleep", "1002"]
  restart = "always"
`

// The whole berth tree of a host (agent, lease guard, the guard's jobs
// namespace) stopped past the session's expiry, then resumed: the guard
// wakes past its deadline and kills every job and exits while the agent,
// fenced, joins again and starts the jobs anew. No start goes through the
// doomed guard, and one cut short by its exit is tried again on the next
// guard: every job runs again, never failed for good (berth issue 24: the
// fencing soak's host-stall rounds found jobs failed with "the lease
// guard's connection ended"). A few rounds, since the start races the
// guard's exit.
func TestHostStallJobsStartAgain(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + hostStallJobs)
	e.start()
	ids := []string{"s0", "s1", "s2"}
	claimPath := fencing.ClaimFilePath(filepath.Join(e.dir, "data"))
	for round := range 3 {
		before := e.waitRunning(ids...)
		guards := e.guardLeafPids() // the guard and its jobs-init
		if len(guards) != 2 {
			t.Fatalf("round %d: processes in the guard's leaf: %v, want the guard and its jobs-init", round, guards)
		}
		// The jobs, the agent, the guard's leaf: resumed in that order.
		var tree []int
		for _, d := range e.cgroupDirs() {
			for _, id := range ids {
				tree = append(tree, testutil.ProcsUnder(filepath.Join(d, "jobs", id))...)
			}
		}
		tree = append(append(tree, e.cmd.Process.Pid), guards...)
		deadline, _, _, err := fencing.ReadClaim(claimPath)
		if err != nil {
			t.Fatalf("round %d: claim file: %v", round, err)
		}
		for _, p := range tree {
			if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
				t.Fatalf("round %d: SIGSTOP %d: %v", round, p, err)
			}
		}
		resumed := 0
		resume := func(n int) { // the first n of tree, then the rest
			for _, p := range tree[resumed:n] {
				_ = syscall.Kill(p, syscall.SIGCONT)
			}
			resumed = max(resumed, n)
		}
		t.Cleanup(func() { resume(len(tree)) })
		// The session's expiry, as the runs were told it, passed while
		// every process is stopped (the guard's deadline is before it),
		// and 1 s more: the store has expired the lease.
		testutil.Eventually(t, 30*time.Second, "the session's expiry passed during the stall", func() bool {
			return boottime(t) > deadline+int64(time.Second)
		})
		// The agent and the jobs first, as a host's processes wake in any
		// order: the agent, fenced, joins again and starts every job
		// while its guard, past its deadline, still sleeps; then the
		// guard, which kills and exits (unless the agent ended it first:
		// a stopped guard that does not answer is ended).
		starts := strings.Count(e.out.String(), `msg="job starting"`)
		resume(len(tree) - len(guards))
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("round %d: the agent starting every job again", round), func() bool {
			return strings.Count(e.out.String(), `msg="job starting"`) >= starts+len(ids)
		})
		resume(len(tree))
		failed := ""
		testutil.Eventually(t, 90*time.Second, fmt.Sprintf("round %d: every job running again with a new pid, or one failed", round), func() bool {
			js := e.jobs()
			for _, id := range ids {
				j := js[id]
				if j.State == "failed" {
					failed = id + ": " + j.Reason
					return true
				}
				if j.State != "running" || j.PID == 0 || j.PID == before[id].PID {
					return false
				}
			}
			return true
		})
		if failed != "" {
			t.Fatalf("round %d: a job failed after the stall: %s\n%s", round, failed, e.out)
		}
	}
	if strings.Contains(e.out.String(), "job failed to start; it is retried on reload") {
		t.Errorf("a job failed to start after a stall:\n%s", e.out)
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
}
