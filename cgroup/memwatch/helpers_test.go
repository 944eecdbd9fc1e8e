package memwatch

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
	"strconv"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// childEnv names the helper process's mode when the test binary runs as a
// workload (TestMain): thrash or alloc, see child.go.
const childEnv = "MEMWATCH_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode, os.Args[len(os.Args)-1]))
	}
	// Orphans of test workloads are re-parented to this process instead
	// of PID 1 (which does not reap on this host).
	if os.Geteuid() == 0 {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	// No test leaves a cgroup directory of its own behind.
	os.Exit(testutil.CheckLeftBehind(m.Run()))
}

// needCgroups skips unless running as root on a host with cgroups.
func needCgroups(t testing.TB) {
	t.Helper()
	testutil.NeedRoot(t)
	if cgroup.DetectMode() == cgroup.Unavailable {
		t.Skip("no cgroup file system mounted")
	}
}

// needV1Memory skips unless the v1 memory controller accounts the jobs
// (a legacy or hybrid host): the threshold mechanism.
func needV1Memory(t testing.TB) {
	t.Helper()
	needCgroups(t)
	if m := cgroup.DetectMode(); m != cgroup.Legacy && m != cgroup.Hybrid {
		t.Skipf("v1 memory threshold; host mode is %s (the v2 path runs in lane 1, make test-v2)", m)
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory/cgroup.event_control"); err != nil {
		t.Skipf("v1 memory controller without cgroup.event_control: %v", err)
	}
}

// needPSI skips unless the kernel keeps PSI and the host has a cgroup2
// hierarchy to keep it per cgroup in.
func needPSI(t testing.TB) {
	t.Helper()
	needCgroups(t)
	if _, err := os.Stat("/proc/pressure/memory"); err != nil {
		t.Skipf("kernel keeps no PSI (%v): needs CONFIG_PSI and psi=1", err)
	}
	if cgroup.DetectMode() == cgroup.Legacy {
		t.Skip("legacy v1 host: no cgroup2 hierarchy holds per-cgroup PSI")
	}
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// testHierarchy opens and prepares a unique root berth-test-<name>-<rand>,
// removed from every hierarchy (processes killed first) at the end of
// the test.
func testHierarchy(t testing.TB) *cgroup.Hierarchy {
	t.Helper()
	needCgroups(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	root := testutil.TrackCgroupRoot(t, fmt.Sprintf("berth-test-%s-%s", name, hex.EncodeToString(b)))
	h, err := cgroup.Open(root)
	if err != nil {
		t.Fatalf("Open(%q): %v", root, err)
	}
	if err := h.Prepare(); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return h
}

// newJob makes the job cgroup jobs/<name> with res, killed and deleted at
// the end of the test (unless the test deleted it).
func newJob(t testing.TB, h *cgroup.Hierarchy, name string, res *specs.LinuxResources) *cgroup.Group {
	t.Helper()
	g, err := h.New(cgroup.JobRel(name, ""), res)
	if err != nil {
		t.Fatalf("create job cgroup %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
		defer cancel()
		if err := g.Kill(ctx); err != nil {
			t.Errorf("kill %s: %v", g.Path(), err)
		}
		if err := g.Delete(ctx); err != nil {
			t.Errorf("delete %s: %v", g.Path(), err)
		}
	})
	return g
}

// memoryLimit is a resource set with only a memory limit, in bytes.
func memoryLimit(bytes int64) *specs.LinuxResources {
	return &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &bytes}}
}

// workload is a process the test started inside a job's cgroup.
type workload struct {
	cmd  *exec.Cmd
	in   io.WriteCloser // its standard input, for an alloc child's commands
	out  io.Reader      // its standard output
	done chan struct{}
	err  error
}

// startIn starts argv inside g as berth starts a run: in cgroup2 (a
// unified or hybrid host) it is cloned into a leaf of g's own
// (CLONE_INTO_CGROUP), as berth's run-<n>, so that a watch of g sees it
// through the hierarchy; in each v1 controller it is written into g's
// cgroup.procs before it is let go. It waits on a pipe until then: nothing
// of it runs outside g. The test's cleanup kills it with g.
func startIn(t testing.TB, g *cgroup.Group, argv ...string) *workload {
	t.Helper()
	p := g.Placement()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read _ && exec "$@"`, "sh"}, argv...)...)
	if p.UnifiedDir != "" {
		leaf := filepath.Join(p.UnifiedDir, cgroup.RunPrefix+"test")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
		fd, err := unix.Open(leaf, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr = &unix.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	w := &workload{cmd: cmd, in: in, out: out, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	go func() {
		w.err = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-w.done:
		case <-time.After(testutil.Deadline(10 * time.Second)):
			t.Errorf("workload %d not reaped", cmd.Process.Pid)
		}
	})
	pid := strconv.Itoa(cmd.Process.Pid)
	for _, f := range p.ProcsFiles {
		if err := os.WriteFile(f, []byte(pid), 0); err != nil {
			t.Fatalf("move %s into %s: %v", pid, f, err)
		}
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	return w
}

// startChild starts this test binary inside g as a helper process of the
// given mode (child.go) with arg.
func startChild(t testing.TB, g *cgroup.Group, mode, arg string) *workload {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return startIn(t, g, "env", childEnv+"="+mode, exe, "-test.run=^$", arg)
}

// stop kills the workload and waits for its reap.
func (w *workload) stop(t testing.TB) {
	t.Helper()
	_ = w.cmd.Process.Kill()
	select {
	case <-w.done:
	case <-time.After(testutil.Deadline(10 * time.Second)):
		t.Fatalf("workload %d not reaped", w.cmd.Process.Pid)
	}
}

// newWatcher starts a Watcher, closed at the end of the test.
func newWatcher(t testing.TB) *Watcher {
	t.Helper()
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// next waits for the next event of h (events of other handles are
// dropped) within Deadline(timeout), failing the test naming what.
func next(t testing.TB, w *Watcher, h *Handle, timeout time.Duration, what string) Event {
	t.Helper()
	deadline := time.After(testutil.Deadline(timeout))
	var evs []Event
	for {
		select {
		case <-w.Ready():
		case <-deadline:
			t.Fatalf("no event of %s within %v: waiting for %s", h.Target().path(), testutil.Deadline(timeout), what)
		}
		evs = w.Drain(evs[:0])
		for _, e := range evs {
			if e.Handle == h {
				return e
			}
		}
	}
}

// openFDs is the number of this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries) - 1 // the directory's own
}
