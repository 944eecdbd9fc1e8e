//go:build soak

package soak

import (
	"os/exec"
	"syscall"
	"testing"
)

// startBurners runs n busy shell loops, each a process competing for the
// CPU with the agents (so that lease renewals run late), killed by PID in
// Cleanup and with the test process should it die.
func startBurners(t testing.TB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start CPU burner: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}
