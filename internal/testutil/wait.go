package testutil

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// NeedRoot skips the test unless it runs as root: berth's tests make real
// cgroups and start real processes.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes cgroups and starts processes")
	}
}

// Eventually polls cond every 20 ms until it holds, and fails the test
// naming what was awaited when it does not within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the last ')' of the command name.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z'
		}
	}
	return true
}

// Poll calls cond every 20 ms until it holds (true) or timeout passes
// (false): Eventually for a caller that reports the failure itself.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
