package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// Unshare returns the path of util-linux unshare(1), after skipping the
// test when time namespaces cannot be made here: not root (unshare(2)
// with CLONE_NEWTIME needs CAP_SYS_ADMIN), no unshare, or a kernel
// without time namespaces (no /proc/self/timens_offsets: before Linux
// 5.6, or without CONFIG_TIME_NS).
func Unshare(t testing.TB) string {
	t.Helper()
	NeedRoot(t)
	if _, err := os.Stat("/proc/self/timens_offsets"); err != nil {
		t.Skipf("no time namespaces on this kernel: %v", err)
	}
	p, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("no unshare(1) (util-linux) to start a process in a time namespace: %v", err)
	}
	return p
}
