package worker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

// procStatus is field name's value in /proc/PID/status (proc(5)).
func procStatus(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, name)
	return ""
}

// A Runtime with a jobs namespace runs every process of a job in it, the
// orphan of a double fork into a session of its own too, each reported by
// its pid in this process's namespace and without CAP_SYS_ADMIN in its
// bounding set; when the namespace's init dies, the kernel kills every
// one of them and JobsDone says so.
func TestJobsNamespaceInitDeathKillsEveryProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace needs CAP_SYS_ADMIN")
	}
	rt, err := StartRuntimeWith(RuntimeOptions{JobsInit: testJobsInit()})
	if err != nil {
		t.Fatal(err)
	}
	init := rt.JobsInit()
	if init <= 0 {
		t.Fatalf("JobsInit() = %d", init)
	}
	g := newTestGroup(t, 0)
	spec := sh(g, `/bin/sh -c 'setsid sleep 1000 & exit 0'; exec sleep 1001`)
	spec.Runtime = rt
	w := New(spec)
	w.Start()
	pid := waitRunning(t, w)
	var procs []int
	testutil.Eventually(t, 20*time.Second, "the main process and the orphan in the job's cgroup", func() bool {
		procs, _ = g.Pids()
		return len(procs) == 2
	})
	for _, p := range procs {
		// NSpid: the pid in every namespace from this one down
		// (proc(5)); the first is the one reported.
		ns := strings.Fields(procStatus(t, p, "NSpid"))
		if len(ns) != 2 || ns[0] != strconv.Itoa(p) {
			t.Errorf("process %d: NSpid %v, want its pid here and one in the jobs namespace", p, ns)
		}
		bnd, err := strconv.ParseUint(procStatus(t, p, "CapBnd"), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if bnd&(1<<unix.CAP_SYS_ADMIN) != 0 {
			t.Errorf("process %d has CAP_SYS_ADMIN in its bounding set (%x)", p, bnd)
		}
	}
	if !containsInt(procs, pid) {
		t.Errorf("main process %d not among the cgroup's %v", pid, procs)
	}
	if err := unix.Kill(init, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rt.JobsDone():
	case <-time.After(testutil.Deadline(20 * time.Second)):
		t.Fatal("JobsDone not closed after the init's SIGKILL")
	}
	testutil.Eventually(t, 20*time.Second, "every process of the job dead", func() bool {
		for _, p := range procs {
			if testutil.Alive(p) {
				return false
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(30*time.Second))
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
}

// A job in the jobs namespace is not its init: a main process without a
// handler for the stop signal ends at it at once (C27), not after the
// grace, as one outside a namespace does.
func TestJobsNamespaceStopSignalEndsMainAtOnce(t *testing.T) {
	if testRT.JobsInit() == 0 {
		t.Skip("the test Runtime has no jobs namespace (not root)")
	}
	g := newTestGroup(t, 0)
	spec := sh(g, `exec sleep 1000`)
	spec.StopTimeout = time.Hour
	w := New(spec)
	w.Start()
	pid := waitRunning(t, w)
	if ns := strings.Fields(procStatus(t, pid, "NSpid")); len(ns) != 2 || ns[1] == "1" {
		t.Fatalf("main process %d: NSpid %v, want a pid other than 1 in the jobs namespace", pid, ns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(30*time.Second))
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	if ex := w.Status().LastExit; ex == nil || ex.Signal != "SIGTERM" {
		t.Fatalf("last exit %+v, want killed by SIGTERM (the stop signal, not SIGKILL after the grace)", ex)
	}
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
