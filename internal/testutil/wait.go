package testutil

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// Slack is the factor by which Eventually, Poll and Deadline stretch the
// deadline a test names. A test names what the awaited thing takes on an
// idle machine, with room to spare; Slack makes that generous enough for a
// loaded 2-core machine running the race detector (make test-loaded). The
// environment variable BERTH_TEST_SLACK (a number, at least 1) sets it;
// default 3.
var Slack = slack()

func slack() float64 {
	v := os.Getenv("BERTH_TEST_SLACK")
	if v == "" {
		return 3
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 1 {
		panic(fmt.Sprintf("BERTH_TEST_SLACK=%q: want a number, at least 1", v))
	}
	return f
}

// Deadline returns d stretched by Slack: the deadline of a wait for a
// condition that a test writes itself (a select on time.After, a
// context.WithTimeout, a subprocess's --timeout) rather than with
// Eventually or Poll. A bound that is itself what a test checks (a renewal
// sent at once rather than a whole interval later) is not a deadline:
// such a test compares against an interval long enough for load instead.
func Deadline(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Slack)
}

// NeedRoot skips the test unless it runs as root: berth's tests make real
// cgroups and start real processes.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes cgroups and starts processes")
	}
}

// Eventually polls cond every 20 ms until it holds, and fails the test
// naming what was awaited when it does not within Deadline(timeout). A
// wait longer than timeout itself is logged: the test is near its
// deadline on this machine.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(Deadline(timeout))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", Deadline(timeout), what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(start); d > timeout {
		t.Logf("waited %v for %s, longer than the %v named (Slack %g)", d.Round(time.Millisecond), what, timeout, Slack)
	}
}

// pfExiting is the task flag PF_EXITING (include/linux/sched.h), field 9
// of /proc/PID/stat: the task is in do_exit and runs no more user code.
const pfExiting = 0x4

// Alive reports whether pid exists, is not a zombie (state Z or X in
// /proc/PID/stat, read by prometheus/procfs) and is not exiting (flag
// PF_EXITING). A PID namespace's init that has been killed stays in exit,
// not yet a zombie, until every process of its namespace has been reaped,
// also those whose parent is outside it (pid_namespaces(7); the kernel's
// zap_pid_ns_processes): on a host whose PID 1 reaps late, it runs no
// code for seconds before it becomes a zombie.
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	st, err := p.Stat()
	return err == nil && st.State != "Z" && st.State != "X" && st.Flags&pfExiting == 0
}

// Poll calls cond every 20 ms until it holds (true) or Deadline(timeout)
// passes (false): Eventually for a caller that reports the failure itself.
func Poll(timeout time.Duration, cond func() bool) bool {
	timeout = Deadline(timeout)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// Stop sends SIGSTOP to pid and waits until every thread of it is stopped
// (state T or t in /proc/PID/task/TID/stat): kill(2) returns before a
// process running on another CPU has stopped, and a thread of it could
// still answer a request sent meanwhile. It fails t when pid cannot be
// signalled or does not stop within Deadline(10 s).
func Stop(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	Eventually(t, 10*time.Second, fmt.Sprintf("every thread of %d stopped", pid), func() bool {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil || len(tasks) == 0 {
			return false
		}
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				return false
			}
			// The state follows the command's closing parenthesis.
			i := bytes.LastIndexByte(b, ')')
			if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				return false
			}
		}
		return true
	})
}
