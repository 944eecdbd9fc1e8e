package test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// hungGuardJobs are two jobs that restart after any exit, and a third
// added by a reload once the guard has been replaced (hungGuardMore).
const hungGuardJobs = `
[cluster]
session_ttl = "10s"

[static]
connectors = ["sleeper", "forker"%s]

[[connector]]
name = "sleeper"
  [connector.run]
  command = ["sleep", "1000"]
  restart = "always"

[[connector]]
name = "forker"
  [connector.run]
  command = ["/bin/sh", "-c", "sleep 1000 & exec sleep 1000"]
  restart = "always"
`

const hungGuardMore = `
[[connector]]
name = "later"
  [connector.run]
  command = ["/bin/sh", "-c", "echo started; exec sleep 1000"]
`

// C34: a hung lease guard (SIGSTOP) is replaced, and after the
// replacement every job starts again and a new start works: the new
// guard's forks are not killed before their exec (the kernel kills a
// CLONE_INTO_CGROUP child when its parent's cgroup was cgroup.kill'ed a
// different number of times than the target; the agent ends a hung
// guard by cgroup.kill of the guard's leaf). Both ways a guard hangs:
// while its agent runs (the agent ends it at a renewal it does not
// answer), and while no agent runs (the next agent ends it at its start).
func TestC34HungGuardReplacedJobsStartAgain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		agentDies bool
	}{{"agent ends it", false}, {"agent SIGKILLed and started again", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.write(e.header("2s") + sprintfJobs(""))
			e.start()
			before := e.waitRunning("sleeper", "forker")
			guards := e.guardPids()
			if len(guards) != 1 {
				t.Fatalf("processes in the guard's cgroup: %v, want one", guards)
			}
			old := guards[0]
			testutil.Stop(t, old)
			stopped := time.Now()
			defer func() { _ = syscall.Kill(old, syscall.SIGCONT) }() // a no-op once it is ended
			if tc.agentDies {
				if err := e.stop(syscall.SIGKILL); err == nil {
					t.Fatal("agent killed by SIGKILL reported success")
				}
				e.start()
			}
			testutil.Eventually(t, 60*time.Second, "the stopped guard ended", func() bool { return !testutil.Alive(old) })
			t.Logf("the stopped guard was ended %s after its SIGSTOP", time.Since(stopped).Round(100*time.Millisecond))
			var next []int
			testutil.Eventually(t, 60*time.Second, "a new guard", func() bool {
				next = e.guardPids()
				return len(next) == 1 && next[0] != old
			})
			// Every job starts again (its run died with the ended guard),
			// and stays running: no start killed before its exec.
			testutil.Eventually(t, 60*time.Second, "every job running again with a new pid", func() bool {
				js := e.jobs()
				for _, id := range []string{"sleeper", "forker"} {
					j := js[id]
					if j.State != "running" || j.PID == 0 || j.PID == before[id].PID {
						return false
					}
				}
				return true
			})
			again := e.jobs()
			// A new start: a job added by a reload runs its program.
			e.write(e.header("2s") + sprintfJobs(`, "later"`) + hungGuardMore)
			e.berth("reload")
			later := e.waitRunning("later")["later"]
			testutil.Eventually(t, 30*time.Second, "the new job's program writes", func() bool {
				return strings.Contains(readFile(e.dir+"/log/later.log"), "started")
			})
			after := e.waitRunning("sleeper", "forker", "later")
			for id, j := range again {
				if id == "later" {
					continue
				}
				if after[id].PID != j.PID {
					t.Errorf("%s: pid %d, %d once started again: its start did not hold", id, after[id].PID, j.PID)
				}
			}
			if after["later"].PID != later.PID || after["later"].Restarts != 0 {
				t.Errorf("later: %+v, first seen as %+v: its start did not hold", after["later"], later)
			}
			if err := e.stop(syscall.SIGTERM); err != nil {
				t.Fatalf("clean stop: %v", err)
			}
			if d := e.cgroupDirs(); len(d) > 0 {
				t.Errorf("cgroup root left after a clean stop: %v", d)
			}
		})
	}
}

// sprintfJobs is hungGuardJobs with more connectors declared.
func sprintfJobs(more string) string { return fmt.Sprintf(hungGuardJobs, more) }

// readFile is the file's content, "" when it cannot be read.
func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
