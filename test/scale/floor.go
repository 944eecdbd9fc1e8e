package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/limits"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// jobLimits are the limits of every job of the run, in the agent's file
// (config) and in the cgroup+fork floor alike.
var jobLimits = limits.Limits{CPU: 0.1, Memory: 16 << 20, Pids: 4}

// floorThreads is how many starts each floor runs at once.
const floorThreads = 16

// floorRun is what one floor cost: wall seconds and the harness's own CPU
// seconds (user and system, getrusage(RUSAGE_SELF)) spent meanwhile.
type floorRun struct {
	Wall, User, Sys float64
}

// cgroupFloor is the second anchor of the start figures: the wall time for
// this harness, with the repository's own cgroup package and no agent, to
// make n cgroups with the jobs' limits (Hierarchy.New of jobs/<id> under
// a fresh root, in every hierarchy) and start one sleep into each from
// birth (Group.ForkInside on a locked launcher thread: on a hybrid host the
// thread crosses into the v1 cgroups and the child is cloned into its
// cgroup2 leaf with CLONE_INTO_CGROUP), floorThreads at a time. Every
// process is then killed and the root removed.
func cgroupFloor(n int) (floorRun, error) {
	res, _, err := jobLimits.Resources(nil)
	if err != nil {
		return floorRun{}, err
	}
	h, err := cgroup.Open("berth-scale-floor-" + strconv.Itoa(os.Getpid()))
	if err != nil {
		return floorRun{}, err
	}
	if err := h.Prepare(); err != nil {
		return floorRun{}, err
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return floorRun{}, err
	}
	defer devnull.Close()
	fds := []uintptr{devnull.Fd(), devnull.Fd(), devnull.Fd()}

	pids := make([]int, n)
	errs := make([]error, n)
	next := make(chan int)
	started := make(chan error, floorThreads)
	release := make(chan struct{})
	var wg, threads sync.WaitGroup
	for range floorThreads {
		threads.Add(1)
		go func() {
			defer threads.Done()
			// Never unlocked: the thread may have been inside a job's
			// cgroups (cgroup.Home), so it ends with the goroutine.
			runtime.LockOSThread()
			home, err := cgroup.ThreadHome()
			started <- err
			if err != nil {
				return
			}
			defer home.Close()
			for i := range next {
				pids[i], errs[i] = floorStart(h, home, res, i, fds)
				wg.Done()
			}
			<-release
		}()
	}
	for range floorThreads {
		if err := <-started; err != nil {
			close(next)
			close(release)
			threads.Wait()
			_ = h.Remove(context.Background())
			return floorRun{}, err
		}
	}
	u0, s0 := selfCPU()
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		next <- i
	}
	wg.Wait()
	r := floorRun{Wall: time.Since(t0).Seconds()}
	u1, s1 := selfCPU()
	r.User, r.Sys = u1-u0, s1-s0
	close(next)
	for _, pid := range pids {
		if pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	}
	close(release)
	threads.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return r, errors.Join(errors.Join(errs...), h.Remove(ctx))
}

// floorStart makes job i's cgroup and starts its sleep inside, on the
// calling launcher thread.
func floorStart(h *cgroup.Hierarchy, home *cgroup.Home, res *specs.LinuxResources, i int, fds []uintptr) (int, error) {
	g, err := h.New(cgroup.JobRel(fmt.Sprintf("j%05d", i), ""), res)
	if err != nil {
		return 0, err
	}
	argv := []string{"/bin/sleep", strconv.Itoa(sleepBase + i)}
	return g.ForkInside(home, func(cgroupFD int) (int, error) {
		attr := &syscall.ProcAttr{Dir: "/", Files: fds, Sys: &syscall.SysProcAttr{Setsid: true}}
		if cgroupFD >= 0 {
			attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, cgroupFD
		}
		return syscall.ForkExec(argv[0], argv, attr)
	})
}

// selfCPU is the harness's user and system CPU seconds so far.
func selfCPU() (user, sys float64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime), tv(ru.Stime)
}

// checkPidMax says why n jobs cannot run on this host, if they cannot:
// each job is one process, and the agent, its guard, the harness and the
// rest of the host need pids too.
func checkPidMax(n int) error {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return err
	}
	max, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	const headroom = 2000
	if n+headroom > max {
		return fmt.Errorf("kernel.pid_max is %d: %d jobs plus %d pids of headroom do not fit (raise it with sysctl kernel.pid_max, or leave %d out of SCALE_N)", max, n, headroom, n)
	}
	return nil
}

// guardPid finds the lease guard serving dataDir (berth guard --data-dir
// dataDir ...), 0 when none runs.
func guardPid(dataDir string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || args[1] != "guard" {
			continue
		}
		for i, a := range args {
			if (a == "--data-dir" && i+1 < len(args) && args[i+1] == dataDir) || a == "--data-dir="+dataDir {
				return pid
			}
		}
	}
	return 0
}

// userSys is utime and stime of pid, seconds (proc(5), fields 14 and 15);
// zeros when pid is 0 or gone.
func userSys(pid int) (user, sys float64) {
	if pid <= 0 {
		return 0, 0
	}
	st, err := procStat(pid)
	if err != nil {
		return 0, 0
	}
	return float64(st.UTime) / clockTicks, float64(st.STime) / clockTicks
}

// fdsPerJob is how many descriptors the agent (and its lease guard, each
// under its own limit) holds per job, measured: the read end of the job's
// log pipe. The headroom in checkNofile covers the rest, which does not
// grow with N (at most 256 open log files, the launcher threads' cgroup
// files, the store's).
const fdsPerJob = 1.0

// checkNofile says why the agent cannot hold n jobs under this process's
// hard RLIMIT_NOFILE (which the agent inherits, and raises its soft limit
// to), if it cannot.
func checkNofile(n int) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	if need := uint64(fdsPerJob*float64(n)) + 1000; need > rl.Max {
		return fmt.Errorf("the hard RLIMIT_NOFILE is %d: the agent holds about %.1f descriptors per job, %d for %d jobs (raise it with ulimit -Hn, or leave %d out of SCALE_N)", rl.Max, fdsPerJob, need, n, n)
	}
	return nil
}

// floorProfile starts this harness's CPU profile for the cgroup+fork floor
// of n jobs (dir/floor-N.pprof) when dir is set and start profiles are
// asked for (d > 0), so that the floor's kernel and Go time can be set
// beside the agent's and the guard's start profiles; the returned func
// stops it. It fails when the file cannot be made.
func floorProfile(dir string, d time.Duration, n int) (stop func(), err error) {
	if dir == "" || d <= 0 {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("floor-%d.pprof", n)))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("profile the floor: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// settle waits until the kernel has finished freeing the cgroups of what
// ran before (the previous N's agent, or a floor): cgroups removed with
// rmdir(2) are freed later by the kernel's workers, which take the same
// cgroup_mutex as every mkdir and fork into a cgroup, so a measurement
// started during that teardown pays for it. It polls the total of
// num_cgroups in /proc/cgroups every 0.5 s until it has not fallen by more
// than 10 over 3 s (dying memory cgroups that hold page cache may linger
// for good: a count that stays is settled), at most timeout, and returns
// how long it waited.
func settle(timeout time.Duration) time.Duration {
	start := time.Now()
	var last []int
	for time.Since(start) < timeout {
		last = append(last, cgroupCount())
		if n := len(last); n > 6 && last[n-7]-last[n-1] <= 10 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return time.Since(start)
}

// cgroupCount is the sum of num_cgroups over the hierarchies of
// /proc/cgroups (0 when unreadable).
func cgroupCount() int {
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return 0
	}
	total := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if n, err := strconv.Atoi(f[2]); err == nil {
			total += n
		}
	}
	return total
}
