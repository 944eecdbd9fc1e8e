package worker

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/berthd/berth/host"
	"golang.org/x/sys/unix"
)

// proc is one started run of a job: its main process and where its wait
// status will arrive (exits, unless spawn was given onExit).
type proc struct {
	pid   int
	exits chan unix.WaitStatus
}

// spawn starts one run of the job described by spec inside g, with stdout
// and stderr on logw, and returns once the job's image has been exec'd.
// The main process's wait status goes to onExit (called from the reaper:
// it must not block), or, when onExit is nil, to the proc's exits channel.
// It runs
// on a launcher thread, through g.ForkInside, which puts the child in the
// group's cgroups before it runs anything (see the package doc). Every
// error names what was being done; when it returns an error no process of
// this run is left to wait for.
func spawn(spec *Spec, g Group, logw *os.File, onExit func(unix.WaitStatus)) (*proc, error) {
	cred, err := host.ResolveCredential(spec.User)
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
	path, err := host.LookPath(spec.Path, spec.Env, spec.Dir)
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

	// Files are the job's only descriptors: syscall.ForkExec closes none of
	// the agent's others, which reach no job because each is close-on-exec
	// (descriptors.go).
	attr := &syscall.ProcAttr{
		Dir:   spec.Dir,
		Env:   spec.Env,
		Files: []uintptr{devnull.Fd(), logw.Fd(), logw.Fd()},
		Sys: &syscall.SysProcAttr{
			Setsid:     true, // own session: the agent's terminal signals do not reach jobs
			Pdeathsig:  syscall.SIGKILL,
			Credential: cred,
		},
	}
	p := &proc{}
	if onExit == nil {
		p.exits = make(chan unix.WaitStatus, 1)
		onExit = func(ws unix.WaitStatus) { p.exits <- ws } // room for one
	}
	p.pid, err = spec.Runtime.launch(g, path, argv, attr, onExit)
	if errors.Is(err, unix.EAGAIN) {
		// The child is forked as root, so RLIMIT_NPROC does not apply: the
		// pids controller refused it.
		return nil, fmt.Errorf("start %s: %w (pids.max of the job's cgroup, or of a group above it, leaves no room)", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	return p, nil
}
