package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/berthd/berth/cgroup"
	"golang.org/x/sys/unix"
)

// proc is one started run of a job: its main process and where its wait
// status will arrive.
type proc struct {
	pid   int
	exits chan unix.WaitStatus
}

// spawn starts one run of the job described by spec inside place, with
// stdout and stderr on logw, and returns once the job's image has been
// exec'd. placed, when not nil, is called with the pid once the process is
// inside every hierarchy and before it is released to exec the job (the
// worker writes its "started" log line there, ahead of anything the job
// writes). Every error names what was being done; when it returns an error no
// process of this run is left to wait for.
//
// On a pure cgroup v2 host the job is cloned straight into its cgroup with
// clone3(CLONE_INTO_CGROUP) (SysProcAttr.UseCgroupFD) — unless the kernel
// fails the probe of cloneIntoCgroupWorks: on some kernels (seen on
// 6.18.44) a child cloned into a cgroup to whose cgroup.kill "1" was once
// written is SIGKILLed at birth, so every restart after Group.Kill would die
// at once. Everywhere else (v1, hybrid, such kernels) the run goes through
// the exec helper, which the agent writes into each v1 cgroup.procs file
// and into the cgroup2 directory's cgroup.procs: moving the held helper by
// pid is not affected, and no job code runs before the helper is inside
// every hierarchy.
func spawn(spec *Spec, place cgroup.Placement, logw *os.File, placed func(pid int)) (*proc, error) {
	cred, err := resolveCredential(spec.User)
	if err != nil {
		return nil, err
	}
	env, err := jobEnv(spec.Env, cred)
	if err != nil {
		return nil, err
	}
	withEnv := *spec
	withEnv.Env = env
	spec = &withEnv
	if spec.Dir != "" {
		fi, err := os.Stat(spec.Dir)
		if err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("working directory %s: not a directory", spec.Dir)
		}
	}
	path, err := lookPath(spec.Path, spec.Env, spec.Dir)
	if err != nil {
		return nil, err
	}
	argv := spec.Args
	if len(argv) == 0 {
		argv = []string{spec.Path}
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("open %s for stdin: %w", os.DevNull, err)
	}
	defer devnull.Close()

	sys := &syscall.SysProcAttr{
		Setsid:     true, // own session: the agent's terminal signals do not reach jobs
		Pdeathsig:  syscall.SIGKILL,
		Credential: cred,
	}
	files := []uintptr{devnull.Fd(), logw.Fd(), logw.Fd()}
	procsFiles := slices.Clone(place.ProcsFiles)
	if place.UnifiedDir != "" {
		procsFiles = append(procsFiles, filepath.Join(place.UnifiedDir, "cgroup.procs"))
	}
	if len(procsFiles) == 0 {
		return nil, errors.New("start: cgroup placement names no cgroup")
	}
	// Pure cgroup v2: born inside with CLONE_INTO_CGROUP, where the kernel
	// gets it right after a cgroup.kill (see cloneIntoCgroupWorks).
	if len(place.ProcsFiles) == 0 && place.UnifiedDir != "" {
		if ok, _ := cloneIntoCgroupWorks(filepath.Dir(place.UnifiedDir)); ok {
			return spawnInto(place.UnifiedDir, path, argv, spec.Env, spec.Dir, files, sys, placed)
		}
	}
	return spawnHelper(spec, procsFiles, path, argv, files, sys, placed)
}

// spawnHelper starts the job through the exec helper (see MaybeRunHelper):
// fork /proc/self/exe held on a pipe, write its pid into every cgroup.procs
// file of procsFiles, release it with the exec request, and read the status
// pipe until EOF (exec succeeded) or an error.
func spawnHelper(spec *Spec, procsFiles []string, path string, argv []string, files []uintptr, sys *syscall.SysProcAttr, placed func(int)) (*proc, error) {
	p := &proc{exits: make(chan unix.WaitStatus, 1)}
	var ctl, status [2]int
	if err := unix.Pipe2(ctl[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("create helper control pipe: %w", err)
	}
	ctlR, ctlW := os.NewFile(uintptr(ctl[0]), "helper-control-r"), os.NewFile(uintptr(ctl[1]), "helper-control-w")
	defer ctlW.Close()
	if err := unix.Pipe2(status[:], unix.O_CLOEXEC); err != nil {
		ctlR.Close()
		return nil, fmt.Errorf("create helper status pipe: %w", err)
	}
	statusR, statusW := os.NewFile(uintptr(status[0]), "helper-status-r"), os.NewFile(uintptr(status[1]), "helper-status-w")
	defer statusR.Close()

	attr := &syscall.ProcAttr{
		Dir:   spec.Dir,
		Env:   []string{helperEnv + "=1"},
		Files: append(files, ctlR.Fd(), statusW.Fd()), // fds 3 and 4 of the helper
		Sys:   sys,
	}
	var err error
	p.pid, err = fork("/proc/self/exe", []string{"berth-exec-helper", spec.JobID}, attr, p.exits)
	ctlR.Close()
	statusW.Close()
	if err != nil {
		return nil, fmt.Errorf("start exec helper for %s: %w", path, err)
	}
	abort := func(err error) (*proc, error) {
		ctlW.Close() // the helper exits 127 without running the job
		_ = unix.Kill(p.pid, unix.SIGKILL)
		<-p.exits
		return nil, err
	}
	pid := []byte(strconv.Itoa(p.pid))
	for _, f := range procsFiles {
		if err := writeProcs(f, pid); err != nil {
			return abort(err)
		}
	}
	if placed != nil {
		placed(p.pid)
	}
	req, err := json.Marshal(execRequest{Path: path, Argv: argv, Env: spec.Env})
	if err != nil {
		return abort(fmt.Errorf("encode exec request: %w", err))
	}
	if _, err := ctlW.Write(req); err != nil {
		return abort(fmt.Errorf("release exec helper %d: %w", p.pid, err))
	}
	ctlW.Close()
	msg, err := io.ReadAll(statusR)
	if err != nil {
		return abort(fmt.Errorf("read exec helper %d status: %w", p.pid, err))
	}
	if len(msg) > 0 {
		<-p.exits // the helper exits 127 after reporting
		return nil, errors.New(string(msg))
	}
	return p, nil
}

// writeProcs moves pid (all its threads) into the cgroup whose cgroup.procs
// file is path (Documentation/admin-guide/cgroup-v1/cgroups.rst,
// Documentation/admin-guide/cgroup-v2.rst "cgroup.procs").
func writeProcs(path string, pid []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("place pid %s in %s: %w", pid, path, err)
	}
	_, werr := f.Write(pid)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("place pid %s in %s: %w", pid, path, werr)
	}
	if cerr != nil {
		return fmt.Errorf("place pid %s in %s: %w", pid, path, cerr)
	}
	return nil
}
