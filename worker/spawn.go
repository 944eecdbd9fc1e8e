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
	// runID names the run for the Spawner that started or handed it
	// ("" when the Runtime's own launcher threads did).
	runID string
}

// Exec is one run's process, resolved: everything a launcher needs to
// fork and exec it, and nothing that needs the job's definition. The
// agent resolves it (Resolve) and starts it itself or has its Spawner
// start it (the lease guard, another process); JSON encodes it for that.
type Exec struct {
	// Path is the absolute path of the program, found in the job's PATH.
	Path string `json:"path"`
	// Argv is the full argv, Argv[0] included.
	Argv []string `json:"argv"`
	// Env is the environment, completed as systemd completes a
	// service's (jobEnv).
	Env []string `json:"env"`
	// Dir is the working directory; "" means the launcher's.
	Dir string `json:"dir,omitempty"`
	// Cred is the job's user, group and supplementary groups; nil runs
	// the job as the launcher's user (root).
	Cred *syscall.Credential `json:"cred,omitempty"`
}

// Resolve turns spec's command into an Exec: the user and group to ids
// (host.ResolveCredential), the environment completed (jobEnv), the
// working directory checked, the program found in the job's PATH. Every
// error names what is wrong (unknown user, missing program, a working
// directory that is not one): a start that fails here never ran.
func Resolve(spec *Spec) (*Exec, error) {
	cred, err := host.ResolveCredential(spec.User)
	if err != nil {
		return nil, err
	}
	env, err := jobEnv(spec.Env, cred)
	if err != nil {
		return nil, err
	}
	if spec.Dir != "" {
		fi, err := os.Stat(spec.Dir)
		if err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("working directory %s: not a directory", spec.Dir)
		}
	}
	path, err := host.LookPath(spec.Path, env, spec.Dir)
	if err != nil {
		return nil, err
	}
	argv := spec.Args
	if len(argv) == 0 {
		argv = []string{spec.Path}
	}
	return &Exec{Path: path, Argv: argv, Env: env, Dir: spec.Dir, Cred: cred}, nil
}

// spawn starts one run of the job described by spec inside g, with stdout
// and stderr on logw, and returns once the job's image has been exec'd.
// The main process's wait status goes to onExit (called from the reaper:
// it must not block), or, when onExit is nil, to the proc's exits channel.
// It runs on a launcher thread, through g.ForkInside, which puts the
// child in the group's cgroups before it runs anything (see the package
// doc). Every error names what was being done; when it returns an error no
// process of this run is left to wait for.
func spawn(spec *Spec, g Group, logw *os.File, onExit func(unix.WaitStatus)) (*proc, error) {
	x, err := Resolve(spec)
	if err != nil {
		return nil, err
	}
	p := &proc{}
	if onExit == nil {
		p.exits = make(chan unix.WaitStatus, 1)
		onExit = func(ws unix.WaitStatus) { p.exits <- ws } // room for one
	}
	p.pid, err = spec.Runtime.Launch(x, g, logw, onExit)
	return p, err
}

// Launch forks and execs x on one of rt's launcher threads, inside g,
// with stdin /dev/null and stdout and stderr on logw, in a session of its
// own, with parent-death signal SIGKILL (prctl(2) PR_SET_PDEATHSIG: the
// launcher thread's end kills it) or, on a Runtime with a jobs namespace,
// in that namespace (jobsNamespace: its init's end kills every process of
// it), and returns its pid once the image has
// been exec'd. onExit gets the main process's wait status from the reaper
// (it must not block). The agent launches through it, and so does the
// lease guard for an agent (guard.Serve). Errors name the program and
// the cause; EAGAIN says that pids.max left no room.
func (rt *Runtime) Launch(x *Exec, g Group, logw *os.File, onExit func(unix.WaitStatus)) (int, error) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, fmt.Errorf("open %s for stdin: %w", os.DevNull, err)
	}
	defer devnull.Close()

	// Files are the job's only descriptors: syscall.ForkExec closes none of
	// the agent's others, which reach no job because each is close-on-exec
	// (descriptors.go).
	attr := &syscall.ProcAttr{
		Dir:   x.Dir,
		Env:   x.Env,
		Files: []uintptr{devnull.Fd(), logw.Fd(), logw.Fd()},
		Sys: &syscall.SysProcAttr{
			Setsid:     true, // own session: the agent's terminal signals do not reach jobs
			Pdeathsig:  syscall.SIGKILL,
			Credential: x.Cred,
		},
	}
	if rt.ns != nil {
		// In the jobs namespace the init's death kills every process
		// (jobsNamespace); Go's Pdeathsig would kill the child at once,
		// whose parent, outside its namespace, is pid 0 there.
		attr.Sys.Pdeathsig = 0
	}
	pid, err := rt.launch(g, x.Path, x.Argv, attr, onExit)
	if errors.Is(err, unix.EAGAIN) {
		// The child is forked as root, so RLIMIT_NPROC does not apply: the
		// pids controller refused it.
		return 0, fmt.Errorf("start %s: %w (pids.max of the job's cgroup, or of a group above it, leaves no room)", x.Path, err)
	}
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", x.Path, err)
	}
	return pid, nil
}
