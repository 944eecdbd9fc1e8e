package test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// jobsDieWithin is how long after its guard's death a job's process may
// still live (docs/cases.md C38): the kernel kills the guard's jobs
// namespace when its init dies, which is at the guard's death.
const jobsDieWithin = time.Second

// C38: a cluster member's jobs, one `sh -c 'sleep 100000 & exec sleep
// 100001'` and one whose child double-forks a process into a session of
// its own (an orphan the namespace's init adopts); SIGKILL agent and
// guard together and start neither: no process of either job is alive
// 1 s after the guard's death (the kernel kills the guard's jobs PID
// namespace), while the standby starts both jobs itself.
func TestC38JobsDieWithTheirGuard(t *testing.T) {
	c := clusterSpec{name: clusterName(), endpoints: embeddedEtcd(t), rebalanceDelay: "0s"}
	workload := `
[[connector]]
name = "forked"
  [connector.run]
  command = ["/bin/sh", "-c", "sleep 100000 & exec sleep 100001"]

[[connector]]
name = "daemonised"
  [connector.run]
  command = ["/bin/sh", "-c", "/bin/sh -c 'setsid sleep 100002 & exit 0'; exec sleep 100003"]
`
	jobs := []string{"forked", "daemonised"}
	a, b := newAgent(t, "a"), newAgent(t, "b")
	a.configure(c, staticTable(jobs, nil)+workload)
	b.configure(c, staticTable(nil, nil)+workload)
	a.start()
	ja := a.waitExactly(settle, jobs...)
	b.start()
	b.waitMember(settle)
	var procs []int
	testutil.Eventually(t, settle, "both processes of each job in its cgroup", func() bool {
		f, d := a.jobProcs("forked"), a.jobProcs("daemonised")
		procs = append(f, d...)
		return len(f) == 2 && len(d) == 2
	})
	for _, id := range jobs {
		if !slices.Contains(procs, ja[id].PID) {
			t.Fatalf("%s: main process %d not among the cgroups' %v", id, ja[id].PID, procs)
		}
	}
	guards := a.guardPids()
	if len(guards) != 1 {
		t.Fatalf("guard processes %v, want one", guards)
	}
	var inits []int
	for _, p := range a.guardLeafPids() {
		if isJobsInit(p) {
			inits = append(inits, p)
		}
	}
	if len(inits) != 1 {
		t.Fatalf("jobs-init processes in the guard's leaf %v, want one", inits)
	}
	for _, p := range procs {
		if !sameNamespace(t, p, inits[0]) {
			t.Errorf("job process %d is not in the PID namespace of the guard's jobs-init %d", p, inits[0])
		}
	}

	// Agent and guard together, and neither starts again.
	_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGKILL)
	if err := syscall.Kill(guards[0], syscall.SIGKILL); err != nil {
		t.Fatalf("kill the guard %d: %v", guards[0], err)
	}
	<-a.waited
	a.waited <- nil // for env.cleanup
	testutil.Eventually(t, 10*time.Second, "the guard dead", func() bool { return !testutil.Alive(guards[0]) })
	dead := time.Now()
	var alive []int
	for {
		alive = alive[:0]
		for _, p := range append(procs, inits...) {
			if testutil.Alive(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 || time.Since(dead) > jobsDieWithin {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(alive) > 0 {
		var what []string
		for _, p := range alive {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			what = append(what, strings.TrimSpace(string(st)))
		}
		t.Fatalf("processes %v of the jobs (or their init, %v) alive %s after the guard's death; /proc/PID/stat:\n%s",
			alive, inits, jobsDieWithin, strings.Join(what, "\n"))
	}
	t.Logf("every process of the jobs gone %s after the guard was seen dead", time.Since(dead).Round(time.Millisecond))
	jb := b.waitExactly(settle, jobs...)
	for _, id := range jobs {
		if jb[id].FencingToken <= ja[id].FencingToken {
			t.Errorf("%s: the standby's token %d, not above the killed run's %d", id, jb[id].FencingToken, ja[id].FencingToken)
		}
	}
}

// sameNamespace reports whether processes a and b are in one PID
// namespace (/proc/PID/ns/pid names the same inode).
func sameNamespace(t *testing.T, a, b int) bool {
	t.Helper()
	ino := func(pid int) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/pid", pid), &st); err != nil {
			t.Fatalf("namespace of %d: %v", pid, err)
		}
		return st.Ino
	}
	return ino(a) == ino(b)
}
