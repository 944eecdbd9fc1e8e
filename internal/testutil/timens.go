package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// Unshare returns the path of util-linux unshare(1), after skipping the
// test when time namespaces cannot be made here: not root (unshare(2)
// with CLONE_NEWTIME needs CAP_SYS_ADMIN), a kernel without time
// namespaces (no /proc/self/timens_offsets: before Linux 5.6, or without
// CONFIG_TIME_NS), or no unshare that makes one with a boottime offset
// (busybox's has no --time).
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
	if out, err := exec.Command(p, "--time", "--boottime", "1", "true").CombinedOutput(); err != nil {
		t.Skipf("%s cannot start a process in a time namespace with a boottime offset: %v %s", p, err, out)
	}
	return p
}
