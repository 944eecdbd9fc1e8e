package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/berthd/berth/internal/testutil"
)

// onLaunchThread runs f on a fresh goroutine locked to its OS thread, with
// that thread's Home, and returns when f has.
func onLaunchThread(t testing.TB, f func(home *Home)) {
	t.Helper()
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var home *Home
		home, err = ThreadHome()
		if err != nil {
			return
		}
		defer home.Close()
		f(home)
	}()
	<-done
	if err != nil {
		t.Fatal(err)
	}
}

// forkExec is the fork callback of the tests: argv[0] exec'd, cloned into
// cgroupFD when it is not -1.
func forkExec(argv ...string) func(int) (int, error) {
	return func(cgroupFD int) (int, error) {
		sys := &syscall.SysProcAttr{}
		if cgroupFD >= 0 {
			sys.UseCgroupFD, sys.CgroupFD = true, cgroupFD
		}
		return syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Sys: sys})
	}
}

// reap kills g and waits for pid, a child of the test.
func reap(t testing.TB, g *Group, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Error(err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
		t.Errorf("reap %d: %v", pid, err)
	}
}

// cgroupLines maps each hierarchy of /proc/<task>/cgroup ("cpu", "memory",
// "" for cgroup2) to its path.
func cgroupLines(t testing.TB, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// checkBornInside checks /proc/pid/cgroup against g: every v1 controller of
// the hierarchy at <root>/<rel>, cgroup2 at <root>/<rel>/run-<n>.
func checkBornInside(t testing.TB, h *Hierarchy, g *Group, pid int) {
	t.Helper()
	lines := cgroupLines(t, fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, s := range h.subsystems {
		if want := filepath.Join(h.v1Roots[s.Name()], g.rel); lines[string(s.Name())] != want {
			t.Errorf("pid %d: %s cgroup %s, want %s", pid, s.Name(), lines[string(s.Name())], want)
		}
	}
	if h.unifiedMount != "" {
		got := lines[""]
		want := filepath.Join(h.unifiedRoot, g.rel) + "/" + RunPrefix
		if !strings.HasPrefix(got, want) || strings.Contains(strings.TrimPrefix(got, want), "/") {
			t.Errorf("pid %d: cgroup2 %s, want %s<n>", pid, got, want)
		}
	}
}

func pidsFile(h *Hierarchy, rel, file string) string {
	if h.mode == Unified {
		return filepath.Join(h.unifiedDir(rel), file)
	}
	if d := h.v1Dir("pids", rel); d != "" {
		return filepath.Join(d, file)
	}
	return ""
}

// A process started with ForkInside is in the group in every hierarchy
// from birth, alone in pids.current under pids.max = 1, and the launcher
// thread is back in its own cgroups afterwards.
func TestForkInside(t *testing.T) {
	h := testHierarchy(t)
	mem := int64(64 << 20)
	g, err := h.New("jobs/a", &specs.LinuxResources{
		Pids:   &specs.LinuxPids{Limit: ptr(int64(1))},
		Memory: &specs.LinuxMemory{Limit: &mem},
	})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	var before, after map[string]string
	onLaunchThread(t, func(home *Home) {
		before = cgroupLines(t, "/proc/thread-self/cgroup")
		pid, err = g.ForkInside(home, forkExec("/bin/sleep", "100"))
		after = cgroupLines(t, "/proc/thread-self/cgroup")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer reap(t, g, pid)
	checkBornInside(t, h, g, pid)
	if !maps(before, after) {
		t.Errorf("launcher thread's cgroups %v after the start, %v before", after, before)
	}
	if f := pidsFile(h, "jobs/a", "pids.current"); f != "" {
		if got := readFile(t, f); got != "1" {
			t.Errorf("pids.current %s, want 1", got)
		}
		if got := readFile(t, pidsFile(h, "jobs/a", "pids.max")); got != "1" {
			t.Errorf("pids.max %s after the start, want 1", got)
		}
	}
	if pids, err := g.Pids(); err != nil || !slices.Equal(pids, []int{pid}) {
		t.Errorf("Pids() = %v, %v; want [%d]", pids, err, pid)
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// A sharing group with pids.max = 2 takes two single-process jobs started
// one after the other, each with pids.max = 1, and refuses a third with
// EAGAIN: the launcher thread's presence is accounted on every level, and
// only its presence.
func TestForkInsideSharingGroupPids(t *testing.T) {
	h := testHierarchy(t)
	if _, err := h.New("jobs/g-s", &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: ptr(int64(2))}}); err != nil {
		t.Fatal(err)
	}
	if pidsFile(h, "jobs/g-s", "pids.max") == "" {
		t.Skip("no pids controller")
	}
	var groups []*Group
	for _, name := range []string{"a", "b", "c"} {
		g, err := h.New("jobs/g-s/"+name, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: ptr(int64(1))}})
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
	}
	var pids []int
	var errs []error
	onLaunchThread(t, func(home *Home) {
		for _, g := range groups {
			pid, err := g.ForkInside(home, forkExec("/bin/sleep", "100"))
			pids, errs = append(pids, pid), append(errs, err)
		}
	})
	for i, g := range groups[:2] {
		if errs[i] != nil {
			t.Fatalf("job %s: %v", g.rel, errs[i])
		}
		defer reap(t, g, pids[i])
		checkBornInside(t, h, g, pids[i])
	}
	if !errors.Is(errs[2], unix.EAGAIN) {
		t.Errorf("third job in a full group: pid %d, error %v; want EAGAIN", pids[2], errs[2])
	}
	for rel, want := range map[string]string{"jobs/g-s": "2", "jobs/g-s/a": "1", "jobs/g-s/c": "1"} {
		if got := readFile(t, pidsFile(h, rel, "pids.max")); got != want {
			t.Errorf("%s pids.max %s, want %s", rel, got, want)
		}
	}
	if got := readFile(t, pidsFile(h, "jobs/g-s", "pids.current")); got != "2" {
		t.Errorf("sharing group pids.current %s, want 2", got)
	}
}

// While a launcher thread is inside a v1 group, the kernel lists the agent's
// pid in the group's cgroup.procs; Pids and Processes leave it out (Kill
// must never signal the agent), and an Update of the pids limit keeps the
// thread's extra slot until it leaves.
func TestForkInsideAgentNotAJobProcess(t *testing.T) {
	needV1(t)
	h := testHierarchy(t)
	g, err := h.New("jobs/a", &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: ptr(int64(1))}})
	if err != nil {
		t.Fatal(err)
	}
	var raw string
	var pids, procs []int
	var pidsErr, procsErr, updErr error
	var maxInside string
	onLaunchThread(t, func(home *Home) {
		_, err = g.ForkInside(home, func(int) (int, error) {
			raw = readFile(t, filepath.Join(h.v1Dir("pids", "jobs/a"), "cgroup.procs"))
			pids, pidsErr = g.Pids()
			procs, procsErr = g.Processes()
			updErr = g.Update(&specs.LinuxResources{Pids: &specs.LinuxPids{Limit: ptr(int64(5))}})
			maxInside = readFile(t, pidsFile(h, "jobs/a", "pids.max"))
			return 0, errors.New("no fork in this test")
		})
	})
	if err == nil || !strings.Contains(err.Error(), "no fork in this test") {
		t.Errorf("ForkInside error %v, want the fork callback's", err)
	}
	if raw != strconv.Itoa(os.Getpid()) {
		t.Fatalf("cgroup.procs with the launcher thread inside: %q, want the agent's pid %d", raw, os.Getpid())
	}
	if pidsErr != nil || procsErr != nil || len(pids) != 0 || len(procs) != 0 {
		t.Errorf("Pids() = %v, %v; Processes() = %v, %v; want both empty", pids, pidsErr, procs, procsErr)
	}
	if updErr != nil || maxInside != "6" {
		t.Errorf("Update to 5 with the thread inside: %v, pids.max %s; want 6", updErr, maxInside)
	}
	if got := readFile(t, pidsFile(h, "jobs/a", "pids.max")); got != "5" {
		t.Errorf("pids.max after the thread left: %s, want 5", got)
	}
	if got := readFile(t, pidsFile(h, "jobs/a", "pids.current")); got != "0" {
		t.Errorf("pids.current after the thread left: %s, want 0", got)
	}
}

// A run started after Kill (cgroup.kill) lives: it is cloned into a new
// leaf, and Kill removes the ended run's leaf.
func TestForkInsideAfterKill(t *testing.T) {
	h := testHierarchy(t)
	if h.unifiedMount == "" {
		t.Skip("no cgroup2 hierarchy")
	}
	g, err := h.New("jobs/a", &specs.LinuxResources{})
	if err != nil {
		t.Fatal(err)
	}
	var leaves []string
	for run := range 3 {
		var pid int
		onLaunchThread(t, func(home *Home) { pid, err = g.ForkInside(home, forkExec("/bin/sleep", "100")) })
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		var ws unix.WaitStatus
		if got, _ := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid {
			t.Fatalf("run %d: pid %d died at birth: %v", run, pid, ws)
		}
		checkBornInside(t, h, g, pid)
		leaves = append(leaves, cgroupLines(t, fmt.Sprintf("/proc/%d/cgroup", pid))[""])
		reap(t, g, pid) // Kill writes cgroup.kill
	}
	if len(slices.Compact(slices.Clone(leaves))) != 3 {
		t.Errorf("leaves %v, want three different", leaves)
	}
	ents, _ := os.ReadDir(h.unifiedDir("jobs/a"))
	var left []string
	for _, e := range ents {
		if e.IsDir() {
			left = append(left, e.Name())
		}
	}
	if len(left) != 0 {
		t.Errorf("leaves left under the group after Kill: %v, want none", left)
	}
}

// On a hybrid host whose kernel lacks CLONE_INTO_CGROUP, the child is
// written into its cgroup2 leaf right after exec.
func TestForkInsideWithoutCloneInto(t *testing.T) {
	h := testHierarchy(t)
	if h.mode != Hybrid {
		t.Skipf("hybrid-only fallback; host mode is %s", h.mode)
	}
	h.cloneInto = false
	g, err := h.New("jobs/a", &specs.LinuxResources{})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	var gotFD []int
	onLaunchThread(t, func(home *Home) {
		pid, err = g.ForkInside(home, func(fd int) (int, error) {
			gotFD = append(gotFD, fd)
			return forkExec("/bin/sleep", "100")(fd)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer reap(t, g, pid)
	if !slices.Equal(gotFD, []int{-1}) {
		t.Errorf("fork got cgroup fds %v, want [-1]", gotFD)
	}
	checkBornInside(t, h, g, pid)
}

// ForkInside refuses a Home made on another thread.
func TestForkInsideWrongThread(t *testing.T) {
	needV1(t)
	h := testHierarchy(t)
	g, err := h.New("jobs/a", &specs.LinuxResources{})
	if err != nil {
		t.Fatal(err)
	}
	var home *Home
	onLaunchThread(t, func(hm *Home) { home = &Home{tid: hm.tid, fds: hm.fds, roots: hm.roots} })
	called := false
	onLaunchThread(t, func(*Home) {
		_, err = g.ForkInside(home, func(int) (int, error) { called = true; return 0, nil })
	})
	if err == nil || called {
		t.Errorf("ForkInside with another thread's Home: error %v, fork called %v", err, called)
	}
}

// BenchmarkForkInside measures ForkInside around a fork that does nothing:
// the cost berth adds to a fork+exec (a new cgroup2 leaf and the previous
// one removed; on v1 the thread's move into the group's cgroups in every
// controller and back, and the pids.max raise and restore).
func BenchmarkForkInside(b *testing.B) {
	h := testHierarchy(b)
	g, err := h.New("jobs/bench", &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: ptr(int64(50000)), Period: ptr(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: ptr(int64(256 << 20))},
		Pids:   &specs.LinuxPids{Limit: ptr(int64(64))},
	})
	if err != nil {
		b.Fatal(err)
	}
	onLaunchThread(b, func(home *Home) {
		var ds []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if _, err := g.ForkInside(home, func(int) (int, error) { return 0, nil }); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds())/1e3, "p50-µs")
	})
}
