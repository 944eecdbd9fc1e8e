package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// probeEnv makes the berth binary, re-executed as the clone probe, exit 0 at
// once (see MaybeRunHelper).
const probeEnv = "BERTH_CLONE_PROBE"

var (
	cloneOnce sync.Once
	cloneOK   bool
	cloneWhy  string
)

// cloneIntoCgroupWorks reports whether clone3(CLONE_INTO_CGROUP) can start
// children in a cgroup2 directory that has been killed through cgroup.kill
// before: berth kills a job's cgroup that way between runs, and some
// kernels (seen on 6.18) SIGKILL every child later cloned into such a
// cgroup. It probes once per process, in a scratch cgroup beside jobsDir's
// children: kill the empty cgroup, clone a child into it, and see it exit 0.
// On a kernel where the probe fails, every start goes through the held
// exec helper instead (no job code runs outside its cgroup either way).
func cloneIntoCgroupWorks(jobsDir string) (bool, string) {
	cloneOnce.Do(func() {
		cloneOK, cloneWhy = probeCloneIntoCgroup(jobsDir)
	})
	return cloneOK, cloneWhy
}

func probeCloneIntoCgroup(jobsDir string) (bool, string) {
	dir := filepath.Join(jobsDir, ".berth-clone-probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return false, fmt.Sprintf("make probe cgroup: %v", err)
	}
	defer func() { _ = unix.Rmdir(dir) }()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return false, fmt.Sprintf("no cgroup.kill: %v", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Sprintf("open probe cgroup: %v", err)
	}
	defer unix.Close(fd)
	exits := make(chan unix.WaitStatus, 1)
	attr := &syscall.ProcAttr{
		Env: []string{probeEnv + "=1"},
		Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Pdeathsig: syscall.SIGKILL},
	}
	if _, err := fork("/proc/self/exe", []string{"berth-clone-probe"}, attr, exits); err != nil {
		return false, fmt.Sprintf("clone into cgroup: %v", err)
	}
	ws := <-exits
	if ws.Exited() && ws.ExitStatus() == 0 {
		return true, ""
	}
	return false, fmt.Sprintf("a child cloned into a cgroup killed before died: %v (kernel bug; using the exec helper)", describeWait(ws))
}

func describeWait(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + unix.SignalName(ws.Signal())
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

// spawnInto starts the job directly inside the cgroup2 directory dir with
// clone3(CLONE_INTO_CGROUP) (SysProcAttr.UseCgroupFD): the child is born
// inside, so no helper is needed (cgroup-v2.rst, "CLONE_INTO_CGROUP").
// Exec errors come back from the fork itself.
func spawnInto(dir, path string, argv []string, env []string, workDir string, files []uintptr, sys *syscall.SysProcAttr, placed func(int)) (*proc, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	defer unix.Close(fd)
	s := *sys
	s.UseCgroupFD, s.CgroupFD = true, fd
	p := &proc{exits: make(chan unix.WaitStatus, 1)}
	attr := &syscall.ProcAttr{Dir: workDir, Env: env, Files: files, Sys: &s}
	p.pid, err = fork(path, argv, attr, p.exits)
	if err != nil {
		return nil, fmt.Errorf("exec %s: %w", path, err)
	}
	if placed != nil {
		placed(p.pid)
	}
	return p, nil
}
