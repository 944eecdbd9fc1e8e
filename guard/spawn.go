package guard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ReadyLine is what a guard that listens writes, with a newline, on its
// ready pipe (ReadyFD).
const ReadyLine = "ready"

// logName is the guard's log file under data_dir: its standard output and
// error (a detached process has no terminal, and the agent's journal
// stream would end with the agent).
const logName = "guard.log"

// ReadyFD is the file descriptor on which `berth guard` finds the write
// end of its ready pipe (the first of exec's extra files).
const ReadyFD = 3

// spawn starts the guard for opts, detached from the agent: a session of
// its own (setsid(2): no controlling terminal, no signal to the agent's
// process group reaches it), no parent-death signal, standard input from
// /dev/null and output appended to <data_dir>/guard.log; and waits until
// it listens (a line on the pipe at ReadyFD) or exits. The agent does not
// wait for it: as a child subreaper the agent's reaper collects it, like
// any orphan, if it exits before the agent.
//
// Errors: the command cannot be started; the guard exited or did not
// listen within readyTimeout (its log says why). A guard that exits
// because another one serves the data_dir is no error: the caller dials
// that one.
func spawn(ctx context.Context, opts Options) error {
	if len(opts.Command) == 0 {
		return errors.New("start the lease guard: no command")
	}
	if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
		return fmt.Errorf("start the lease guard: %w", err)
	}
	logFile := filepath.Join(opts.DataDir, logName)
	out, err := os.OpenFile(logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("start the lease guard: %w", err)
	}
	defer out.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("start the lease guard: %w", err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start the lease guard: %w", err)
	}
	defer r.Close()
	argv := append(append([]string(nil), opts.Command...), "--data-dir", opts.DataDir, "--cgroup-root", opts.CgroupRoot)
	env := opts.Env
	if env == nil {
		env = guardEnviron(os.Environ())
	}
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Env:   env,
		Files: []*os.File{null, out, out, w},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	w.Close()
	if err != nil {
		return fmt.Errorf("start the lease guard %v: %w", argv, err)
	}
	pid := p.Pid
	_ = p.Release()
	deadline := time.Now().Add(readyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = r.SetReadDeadline(deadline)
	line, err := bufio.NewReader(r).ReadString('\n')
	if strings.TrimSpace(line) == ReadyLine {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("start the lease guard (pid %d): not listening after %s; see %s", pid, readyTimeout, logFile)
	}
	// It exited without listening: another guard won the lock (the
	// caller dials it), or it failed (the caller's dial says so).
	return nil
}

// guardEnviron is the agent's environment without what systemd meant for
// the agent's process alone: its notification socket and watchdog, and
// socket activation's descriptors (sd_notify(3), sd_listen_fds(3)).
func guardEnviron(env []string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// NotifyReady writes ReadyLine on the pipe the agent passed at ReadyFD,
// when there is one (a FIFO), and closes it: the guard calls it once it
// listens (ServeOptions.Ready).
func NotifyReady() {
	var st unix.Stat_t
	if unix.Fstat(ReadyFD, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return
	}
	f := os.NewFile(ReadyFD, "ready")
	_, _ = f.WriteString(ReadyLine + "\n")
	_ = f.Close()
}
