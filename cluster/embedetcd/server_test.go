package embedetcd

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fatalChildEnv makes the test binary the child of
// TestFatalOnFullDataDir: it starts an embedded etcd on the data
// directory the variable names.
const fatalChildEnv = "BERTH_TEST_EMBEDDED_FATAL_DIR"

// An embedded etcd on a data_dir too small for its first WAL segment: the
// store cannot go on, onFatal is told why ("failed to create WAL: no space
// left on device") and the process exits 1 — instead of a panic with a
// stack trace. Run in a child process, since it ends the process.
func TestFatalOnFullDataDir(t *testing.T) {
	if dir := os.Getenv(fatalChildEnv); dir != "" {
		_, err := StartWithFatal(dir, func(err error) { fmt.Printf("onFatal: %v\n", err) })
		fmt.Printf("StartWithFatal returned: %v\n", err)
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	cmd := exec.Command(os.Args[0], "-test.run=^TestFatalOnFullDataDir$")
	cmd.Env = append(os.Environ(), fatalChildEnv+"="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("child exit %v, want status 1\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "onFatal: failed to create WAL: no space left on device") {
		t.Errorf("onFatal was not told why:\n%s", out.String())
	}
	if strings.Contains(out.String(), "StartWithFatal returned") || strings.Contains(out.String(), "goroutine ") {
		t.Errorf("the process went on past the store's failure or panicked:\n%s", out.String())
	}
}
