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

// timensTTL is the session TTL of the time namespace tests: long enough
// for an agent to start and adopt on a loaded machine before the guard's
// deadline (about TTL − max(1 s, TTL/5) + half that margin after the
// last renewal).
const timensTTL = 15 * time.Second

// timensJob is guardJob with a session TTL of timensTTL.
var timensJob = fmt.Sprintf(`
[cluster]
session_ttl = %q

[static]
connectors = ["orphan"]

[[connector]]
name = "orphan"
  [connector.run]
  command = ["/bin/sh", "-c", "setsid sleep 1000 & exec sleep 1000"]
`, timensTTL)

// inTimeNamespace runs its command in a time namespace whose clocks run
// 10 minutes ahead of the host's (time_namespaces(7)).
func inTimeNamespace(t *testing.T) []string {
	return []string{testutil.Unshare(t), "--time", "--boottime", "600", "--monotonic", "600"}
}

// boottimeOffset is the boottime offset of process pid's time namespace,
// as /proc/PID/timens_offsets says ("boottime <s> <ns>").
func boottimeOffset(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/timens_offsets", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "boottime" {
			return f[1]
		}
	}
	t.Fatalf("no boottime line in /proc/%d/timens_offsets:\n%s", pid, b)
	return ""
}

// C37: an agent and its guard in different time namespaces (one started
// under `unshare --time --boottime 600 --monotonic 600`, the other not)
// agree on the deadline: the agent that finds the guard adopts the job
// (the guard does not kill it 10 minutes early, at once), and once that
// agent is SIGKILLed the guard kills the job at the real deadline, not 10
// minutes late. Both ways: the guard started outside and the next agent
// inside, and the other way round.
func TestC37DeadlineAcrossTimeNamespaces(t *testing.T) {
	ns := inTimeNamespace(t)
	for _, tc := range []struct {
		name          string
		first, second []string // the first agent's wrap (and so its guard's), the second's
	}{
		{"agent-in-namespace", nil, ns},
		{"guard-in-namespace", ns, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.write(e.header("2s") + timensJob)
			e.wrap = tc.first
			e.start()
			procs := e.jobProcs()
			guards := e.guardPids()
			if len(guards) != 1 {
				t.Fatalf("processes in the guard's cgroup: %v, want one", guards)
			}
			want := map[bool]string{true: "600", false: "0"}
			if got := boottimeOffset(t, guards[0]); got != want[tc.first != nil] {
				t.Fatalf("the guard's boottime offset is %s s, want %s", got, want[tc.first != nil])
			}
			if err := e.stop(syscall.SIGKILL); err == nil {
				t.Fatal("agent killed by SIGKILL reported success")
			}
			e.wrap = tc.second
			e.start()
			if got := boottimeOffset(t, e.cmd.Process.Pid); got != want[tc.second != nil] {
				t.Fatalf("the second agent's boottime offset is %s s, want %s", got, want[tc.second != nil])
			}
			if again := e.jobProcs(); again[0] != procs[0] || again[1] != procs[1] {
				t.Fatalf("job processes %v after the second agent's start, %v before: not adopted", again, procs)
			}
			if g := e.guardPids(); len(g) != 1 || g[0] != guards[0] {
				t.Fatalf("guard %v after the second agent's start, %v before", g, guards)
			}
			killed := time.Now()
			if err := e.stop(syscall.SIGKILL); err == nil {
				t.Fatal("agent killed by SIGKILL reported success")
			}
			e.checkGuardKilled(procs, guards)
			d := time.Since(killed)
			t.Logf("every process of the job dead %s after the agent's SIGKILL (session TTL %s)", d.Round(time.Millisecond), timensTTL)
			if d > testutil.Deadline(timensTTL+5*time.Second) {
				t.Errorf("the guard killed the job %s after the agent's SIGKILL, more than the session TTL (%s) allows", d, timensTTL)
			}
		})
	}
}
