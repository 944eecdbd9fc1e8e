package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	jobspec "github.com/berthd/berth/spec"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// waitStarted waits until w has left Starting and returns its status.
func waitStarted(t testing.TB, w *Worker) Status {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "worker past starting", func() bool { return w.Status().State != Starting })
	return w.Status()
}

// checkThreadsHome fails t if any thread of this process sits in a test
// job's cgroup: a launcher thread must always return home.
func checkThreadsHome(t testing.TB) {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "cgroup"))
		if err != nil {
			continue // the thread ended
		}
		if strings.Contains(string(b), "berth-worker-test") {
			t.Errorf("thread %s of the agent is in a job's cgroup:\n%s", e.Name(), b)
		}
	}
}

// groupFile is the path of a control file of g: in the v1 controller
// ctrl's directory on a v1 or hybrid host, in the cgroup2 directory on a
// unified host; "" when that controller is not in use.
func groupFile(g *testGroup, ctrl, file string) string {
	p := g.Placement()
	if cgroup.DetectMode() == cgroup.Unified {
		return filepath.Join(p.UnifiedDir, file)
	}
	for _, f := range p.ProcsFiles {
		if strings.HasPrefix(f, "/sys/fs/cgroup/"+ctrl+"/") {
			return filepath.Join(filepath.Dir(f), file)
		}
	}
	return ""
}

// Single-process jobs with pids = 1, 2, 3 and 4, ten of each started
// together. Every one runs, inside its cgroup, with pids.current = 1:
// nothing of the agent's (launcher threads, helper) counts against a job.
func TestPidsLimitedJobsAllStart(t *testing.T) {
	type run struct {
		w     *Worker
		g     *testGroup
		limit int64
	}
	var runs []run
	for limit := int64(1); limit <= 4; limit++ {
		for i := range 10 {
			l := limit
			g := newTestGroupRes(t, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &l}})
			if groupFile(g, "pids", "pids.max") == "" {
				t.Skip("no pids controller")
			}
			w := New(Spec{
				JobID: fmt.Sprintf("sleep-pids%d-%d", limit, i), Path: "sleep", Args: []string{"sleep", "1000"},
				Env: []string{testPATH}, Group: g, StopTimeout: 5 * time.Second, Runtime: testRT,
			})
			t.Cleanup(func() { _ = w.Stop(context.Background()) })
			runs = append(runs, run{w: w, g: g, limit: limit})
		}
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(r.w.Start)
	}
	wg.Wait()
	for _, r := range runs {
		st := waitStarted(t, r.w)
		if st.State != Running {
			t.Errorf("pids=%d: %s, want running (status %+v)", r.limit, st.State, st)
			continue
		}
		checkInGroup(t, st.PID, r.g)
		s, err := r.g.FullUsage()
		if err != nil {
			t.Fatal(err)
		}
		if s.Pids != 1 || s.Limits.PidsLimit != uint64(r.limit) {
			t.Errorf("pids=%d job pid %d: pids.current %d, pids.max %d; want 1 and %d", r.limit, st.PID, s.Pids, s.Limits.PidsLimit, r.limit)
		}
	}
	checkThreadsHome(t)
	for _, r := range runs {
		if st := r.w.Status(); st.State != Running || !testutil.Alive(st.PID) {
			t.Errorf("pids=%d: %+v after all started, want running", r.limit, st)
		}
	}
}

// A cgroup that refuses the job's process for good leaves the worker
// Failed with the kernel's reason, never running then exited; the launcher
// thread is back home either way. (A refusal that passes, a pids.max
// reached, backs off instead: TestTransientStartFailureIsRetried.)
func TestStartRefusedByCgroup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ctrl   string
		file   string
		value  string
		v1only bool
		reason string
	}{
		{"cpuset without CPUs", "cpuset", "cpuset.cpus", "\n", true, "no space left on device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.v1only && cgroup.DetectMode() == cgroup.Unified {
				t.Skip("a v1 cpuset refuses a task; on cgroup v2 an empty cpuset.cpus means the parent's")
			}
			g := newTestGroup(t, 0)
			f := groupFile(g, tc.ctrl, tc.file)
			if f == "" {
				t.Skipf("no %s controller", tc.ctrl)
			}
			if err := os.WriteFile(f, []byte(tc.value), 0); err != nil {
				t.Fatalf("write %q to %s: %v", tc.value, f, err)
			}
			var logs testutil.SyncBuffer
			spec := sh(g, "exit 0")
			spec.Log = &logs
			w := startWorker(t, spec)
			<-w.Done()
			st := w.Status()
			if st.State != Failed || !strings.Contains(st.Reason, tc.reason) || st.LastExit != nil {
				t.Errorf("status %+v, want failed with reason containing %q and no exit", st, tc.reason)
			}
			if strings.Contains(logs.String(), "berth: started") {
				t.Errorf("log says started:\n%s", logs.String())
			}
			checkThreadsHome(t)
		})
	}
}

// killedDirGroup clones its runs into one cgroup2 directory that was
// killed through cgroup.kill before, instead of a fresh leaf.
type killedDirGroup struct {
	*testGroup
	dir string
}

func (k *killedDirGroup) ForkInside(_ *cgroup.Home, fork func(int) (int, error)) (int, error) {
	fd, err := unix.Open(k.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	return fork(fd)
}

// A child killed before it execs the job is a failed start with the
// reason, not a run that exited; being killed from outside (a fence), it
// passes, so the job backs off to try again. Some kernels (seen on 6.18)
// SIGKILL a child cloned into a cgroup once killed through cgroup.kill, at
// birth: that is the death used here. Skipped where the kernel lets it
// live.
func TestDeathBeforeExecBacksOff(t *testing.T) {
	g := newTestGroup(t, 0)
	ud := g.Placement().UnifiedDir
	if ud == "" {
		t.Skip("no cgroup2 hierarchy")
	}
	dir := filepath.Join(ud, "killed")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		t.Skipf("no cgroup.kill: %v", err)
	}
	var logs testutil.SyncBuffer
	spec := sh(g, "exit 0")
	spec.Group = &killedDirGroup{testGroup: g, dir: dir}
	spec.Log = &logs
	w := startWorker(t, spec)
	var st Status
	testutil.Eventually(t, 20*time.Second, "the start's end", func() bool {
		st = w.Status()
		return st.State == Exited || st.State == BackingOff || st.State == Failed
	})
	if st.State == Exited && st.LastExit != nil && st.LastExit.Code == 0 {
		t.Skipf("this kernel (%s) keeps children cloned into a killed cgroup", kernelRelease())
	}
	if st.State != BackingOff || !strings.Contains(st.Reason, "died before exec: killed by SIGKILL") || st.LastExit != nil {
		t.Errorf("status %+v, last exit %+v; want backoff: died before exec", st, st.LastExit)
	}
	if strings.Contains(logs.String(), "berth: started") || !strings.Contains(logs.String(), "berth: start failed: ") {
		t.Errorf("log:\n%s", logs.String())
	}
}

func kernelRelease() string {
	var u unix.Utsname
	_ = unix.Uname(&u)
	return unix.ByteSliceToString(u.Release[:])
}

// Each run is cloned into a new cgroup2 leaf below the group, and the
// previous run's leaf is removed: a restart after Kill (cgroup.kill) is
// never SIGKILLed at birth, on any kernel.
func TestRestartsRunInFreshLeaf(t *testing.T) {
	g := newTestGroup(t, 0)
	ud := g.Placement().UnifiedDir
	if ud == "" {
		t.Skip("no cgroup2 hierarchy")
	}
	var logs testutil.SyncBuffer
	spec := sh(g, `cat /proc/self/cgroup | grep '^0::'; exit 1`)
	spec.Restart = jobspec.RestartAlways
	spec.Backoff = fastBackoff
	spec.Log = &logs
	w := startWorker(t, spec)
	testutil.Eventually(t, 20*time.Second, "three restarts", func() bool {
		st := w.Status()
		return st.Restarts >= 3 || st.State == Failed
	})
	if st := w.Status(); st.State == Failed || st.LastExit == nil || st.LastExit.Code != 1 {
		t.Fatalf("status %+v, last exit %+v; want restarts exiting 1", st, st.LastExit)
	}
	var leaves []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.HasPrefix(l, "0::") {
			leaves = append(leaves, filepath.Base(l))
		}
	}
	if len(leaves) < 3 || len(slices.Compact(slices.Clone(leaves))) != len(leaves) {
		t.Errorf("runs' cgroup2 leaves %v, want a different one per run", leaves)
	}
	for _, l := range leaves {
		if !strings.HasPrefix(l, cgroup.RunPrefix) {
			t.Errorf("run in %s, want a %s<n> leaf", l, cgroup.RunPrefix)
		}
	}
	ents, err := os.ReadDir(ud)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), cgroup.RunPrefix) {
			n++
		}
	}
	if n > 1 {
		t.Errorf("%d run leaves under %s, want the latest only", n, ud)
	}
}

// benchP50 runs op b.N times, timing only what op times with the returned
// duration, and reports the median as p50-µs.
func benchP50(b *testing.B, op func() time.Duration) {
	var ds []time.Duration
	for b.Loop() {
		ds = append(ds, op())
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds())/1e3, "p50-µs")
}

// BenchmarkStart measures one start of a limited job: from spawn (what the
// worker calls for every run) to /bin/true exec'd inside its cgroup with
// 0.5 CPU, 256 MiB and 64 pids, through a launcher thread (thread crossing
// into the v1 cgroups, a fresh cgroup2 leaf, clone3 into it). Each op's
// process is then reaped outside the timing. Compare with
// BenchmarkForkExecFloor in the same run.
func BenchmarkStart(b *testing.B) {
	quota, period, mem, pids := int64(50000), uint64(100000), int64(256<<20), int64(64)
	g := newTestGroupRes(b, &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
		Memory: &specs.LinuxMemory{Limit: &mem, Swap: &mem},
		Pids:   &specs.LinuxPids{Limit: &pids},
	})
	logs, err := testRT.newLogPipe(&testutil.SyncBuffer{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { logs.release(); <-logs.done }()
	logw, err := logs.writer()
	if err != nil {
		b.Fatal(err)
	}
	defer logw.Close()
	spec := Spec{JobID: "bench", Path: "/bin/true", Group: g, Runtime: testRT}
	benchP50(b, func() time.Duration {
		t0 := time.Now()
		p, err := spawn(&spec, g, logw, nil)
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if ws := <-p.exits; ws.ExitStatus() != 0 {
			b.Fatalf("status %v", ws)
		}
		b.StartTimer()
		return d
	})
}

// BenchmarkForkExecFloor is the floor BenchmarkStart is compared with:
// /bin/true forked and exec'd on a launcher thread, no cgroup, measured the
// same way (to exec, not to exit).
func BenchmarkForkExecFloor(b *testing.B) {
	benchP50(b, func() time.Duration { return launchTrue(b) })
}

// launchTrue starts /bin/true on a launcher thread with no cgroup and
// returns how long the launch took; the wait for its exit is not timed.
func launchTrue(b *testing.B) time.Duration {
	attr := &syscall.ProcAttr{Env: []string{testPATH}, Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}}
	exits := make(chan unix.WaitStatus, 1)
	t0 := time.Now()
	_, err := testRT.launch(nil, "/bin/true", []string{"true"}, attr, func(ws unix.WaitStatus) { exits <- ws })
	d := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	<-exits
	b.StartTimer()
	return d
}

// BenchmarkForkExecOpenFiles is the fork+exec floor from a process that
// holds many open descriptors, as the lease guard does (one log pipe read
// end per job): clone(2) copies the whole descriptor table into the child
// and execve(2) then closes every close-on-exec entry of it, so each start
// costs time in proportion to the jobs already running. Sub-benchmarks by
// how many pipe ends the process holds beside its usual ones; p50 per start.
func BenchmarkForkExecOpenFiles(b *testing.B) {
	for _, n := range []int{0, 1000, 10000} {
		b.Run(fmt.Sprintf("fds=%d", n), func(b *testing.B) {
			fds := make([]int, 0, n)
			defer func() {
				for _, fd := range fds {
					unix.Close(fd)
				}
			}()
			for len(fds) < n {
				var p [2]int
				if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
					b.Skipf("%d descriptors: %v (RLIMIT_NOFILE)", n, err)
				}
				fds = append(fds, p[0], p[1])
			}
			benchP50(b, func() time.Duration { return launchTrue(b) })
		})
	}
}

// BenchmarkStart100 measures 100 limited jobs started at once from 100
// goroutines, as an agent starting its jobs does: per op, the wall time
// from the first spawn to the last one's return, divided by 100 (reported
// as µs-per-start). The launcher threads cross into the cgroups in
// parallel; forks themselves are serialised by the Go runtime.
func BenchmarkStart100(b *testing.B) {
	const n = 100
	pids := int64(1)
	groups := make([]*testGroup, n)
	for i := range groups {
		groups[i] = newTestGroupRes(b, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &pids}})
	}
	logs, err := testRT.newLogPipe(&testutil.SyncBuffer{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { logs.release(); <-logs.done }()
	logw, err := logs.writer()
	if err != nil {
		b.Fatal(err)
	}
	defer logw.Close()
	var total time.Duration
	for b.Loop() {
		procs := make([]*proc, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		t0 := time.Now()
		for i, g := range groups {
			spec := Spec{JobID: "bench", Path: "/bin/true", Group: g, Runtime: testRT}
			wg.Go(func() { procs[i], errs[i] = spawn(&spec, g, logw, nil) })
		}
		wg.Wait()
		total += time.Since(t0)
		b.StopTimer()
		for i, p := range procs {
			if errs[i] != nil {
				b.Fatal(errs[i])
			}
			<-p.exits
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*n)/1e3, "µs-per-start")
}
