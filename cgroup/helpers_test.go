package cgroup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	// Orphaned grandchildren of test workloads are re-parented to this
	// process instead of PID 1 (which does not reap on this host), and
	// reapOrphans reaps them.
	if os.Geteuid() == 0 {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	// No test leaves a cgroup directory of its own behind.
	os.Exit(testutil.CheckLeftBehind(m.Run()))
}

// needCgroups skips unless running as root on a host with cgroups.
func needCgroups(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if DetectMode() == Unavailable {
		t.Skip("no cgroup file system mounted")
	}
}

// needV1 skips unless v1 controllers do the limiting (Legacy or Hybrid).
func needV1(t testing.TB) {
	t.Helper()
	needCgroups(t)
	if m := DetectMode(); m != Legacy && m != Hybrid {
		t.Skipf("v1 files checked; host mode is %s", m)
	}
}

// needUnified skips unless the host is pure cgroup v2.
func needUnified(t testing.TB) {
	t.Helper()
	needCgroups(t)
	if m := DetectMode(); m != Unified {
		t.Skipf("cgroup v2 code path; host mode is %s (runs in the v2 VM lane)", m)
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// testHierarchy opens and prepares a unique root berth-test-<name>-<rand>,
// removed from every hierarchy (processes killed first) by t.Cleanup.
func testHierarchy(t testing.TB) *Hierarchy {
	t.Helper()
	needCgroups(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	root := testutil.TrackCgroupRoot(t, fmt.Sprintf("berth-test-%s-%s", name, hex.EncodeToString(b)))
	h, err := Open(root)
	if err != nil {
		t.Fatalf("Open(%q): %v", root, err)
	}
	if err := h.Prepare(); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
		defer cancel()
		if err := h.Cleanup(ctx, ""); err != nil {
			t.Errorf("cleanup of test root %s: %v", root, err)
		}
		if err := h.deleteRel(ctx, ""); err != nil {
			t.Errorf("delete test root %s: %v", root, err)
		}
		reapOrphans()
	})
	return h
}

// job is a test workload running inside a group.
type job struct {
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	stderr *testutil.SyncBuffer
}

// startIn starts /bin/sh -c script inside g: the shell is started held on a
// pipe, its pid is written into every v1 cgroup.procs and the unified
// cgroup.procs, and only then is it released to exec the script, so no
// process of the script runs outside g. The test reaps it (cmd.Wait in a
// goroutine); t.Cleanup kills the group and waits for the reap.
func startIn(t testing.TB, g *Group, script string) *job {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `read _ && exec /bin/sh -c "$0"`, script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	j := &job{cmd: cmd, done: make(chan struct{}), stderr: &testutil.SyncBuffer{}}
	cmd.Stderr = j.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", script, err)
	}
	go func() {
		j.err = cmd.Wait()
		close(j.done)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
		defer cancel()
		_ = g.Kill(ctx)
		select {
		case <-j.done:
		case <-ctx.Done():
			t.Errorf("workload %d not reaped", cmd.Process.Pid)
		}
	})
	pid := []byte(fmt.Sprint(cmd.Process.Pid))
	p := g.Placement()
	files := p.ProcsFiles
	if p.UnifiedDir != "" {
		files = append(files, filepath.Join(p.UnifiedDir, "cgroup.procs"))
	}
	for _, f := range files {
		if err := os.WriteFile(f, pid, 0); err != nil {
			t.Fatalf("move %s into %s: %v", pid, f, err)
		}
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	_ = in.Close()
	return j
}

// wait waits for the workload's exit and returns cmd.Wait's error.
func (j *job) wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case <-j.done:
		return j.err
	case <-time.After(testutil.Deadline(timeout)):
		t.Fatalf("workload %d still running after %s", j.cmd.Process.Pid, testutil.Deadline(timeout))
		return nil
	}
}

// exited reports whether the workload has been reaped.
func (j *job) exited() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// reapOrphans reaps zombie orphans re-parented to the test process (a
// subreaper). It runs only after the test's own exec.Cmd children were
// waited for, so it steals no exit status.
func reapOrphans() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || errors.Is(err, unix.ECHILD) || err != nil {
			return
		}
	}
}

// readFile returns a control file's trimmed content.
func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func ptr[T any](v T) *T { return &v }

// signaled reports whether err is an exit by signal sig.
func signaled(err error, sig unix.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}
