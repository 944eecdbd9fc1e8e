package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Output runs argv (an absolute path first) as a child of this process,
// with no standard input, and returns what it wrote to its standard output
// and error, together, once it has exited: os/exec's CombinedOutput for a
// process whose children the reaper collects. os/exec must not be used
// there (package doc): the reaper's wait4(-1) takes the child's exit
// status first, and Wait fails with ECHILD. The child is forked through
// the reaper, which hands its status back. When ctx ends first the child
// is SIGKILLed and ctx's error returned. Errors: the fork or exec (the
// program is missing), a non-zero exit ("exit status N") or a signal
// ("killed by SIGNAL"), each with the output so far.
func Output(ctx context.Context, argv []string) ([]byte, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("run: no command")
	}
	r, err := holdReaper()
	if err != nil {
		return nil, err
	}
	defer releaseReaper(r)
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", argv[0], err)
	}
	defer null.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", argv[0], err)
	}
	defer pr.Close()
	exited := make(chan unix.WaitStatus, 1)
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{null.Fd(), pw.Fd(), pw.Fd()}}
	pid, err := r.forkExec(argv[0], argv, attr, func(ws unix.WaitStatus) { exited <- ws })
	pw.Close()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", argv[0], err)
	}
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&out, pr) // ends when the child and its children close the pipe
	}()
	var ws unix.WaitStatus
	select {
	case ws = <-exited:
	case <-ctx.Done():
		_ = unix.Kill(pid, unix.SIGKILL)
		<-exited
		pr.Close()
		<-read
		return out.Bytes(), fmt.Errorf("run %s: %w", argv[0], ctx.Err())
	}
	select {
	case <-read:
	case <-ctx.Done(): // a descendant holds the pipe open
		pr.Close()
		<-read
	}
	switch {
	case ws.Exited() && ws.ExitStatus() == 0:
		return out.Bytes(), nil
	case ws.Exited():
		return out.Bytes(), fmt.Errorf("exit status %d", ws.ExitStatus())
	default:
		return out.Bytes(), fmt.Errorf("%s", describeWait(ws))
	}
}
