package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// helperEnv is the environment variable that puts the berth binary in exec
// helper mode; the helper's environment holds nothing else.
const helperEnv = "BERTH_EXEC_HELPER"

// File descriptors of the exec helper, after stdin, stdout and stderr.
const (
	helperControlFD = 3 // read: the execRequest, sent once the helper is inside its cgroup
	helperStatusFD  = 4 // write, close-on-exec: the exec error; EOF means exec succeeded
)

// helperExitExecFailed is the helper's exit code when the job could not be
// exec'd, as a shell reports "command not found / not executable".
const helperExitExecFailed = 127

// execRequest is what the agent sends the helper once it has been placed.
type execRequest struct {
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
}

// MaybeRunHelper runs the exec helper and never returns when this process
// was started as one (environment BERTH_EXEC_HELPER=1); otherwise it returns
// at once. main must call it first thing, and a test binary of a package
// that starts workers must call it from TestMain before m.Run.
//
// The helper is how a job starts inside its v1 cgroups without a moment
// outside them: it waits on fd 3 until the agent has written its pid into
// every v1 cgroup.procs file, reads the job's resolved path, argv and
// environment from fd 3, and execve(2)s it. If execve fails it writes the
// error to fd 4 (close-on-exec, so the agent reads EOF on success) and exits
// with status 127. If the agent closes fd 3 without a request (placement
// failed) the helper exits 127 without running anything.
func MaybeRunHelper() {
	if os.Getenv(probeEnv) == "1" {
		os.Exit(0) // the clone probe: alive means CLONE_INTO_CGROUP works
	}
	if os.Getenv(helperEnv) != "1" {
		return
	}
	os.Exit(runHelper())
}

func runHelper() int {
	unix.CloseOnExec(helperControlFD)
	unix.CloseOnExec(helperStatusFD)
	req, err := readExecRequest(helperControlFD)
	if err != nil {
		reportExecError(fmt.Errorf("read exec request: %w", err))
		return helperExitExecFailed
	}
	err = unix.Exec(req.Path, req.Argv, req.Env)
	reportExecError(fmt.Errorf("exec %s: %w", req.Path, err))
	return helperExitExecFailed
}

// readExecRequest reads fd until EOF and decodes one execRequest.
func readExecRequest(fd int) (execRequest, error) {
	var (
		buf []byte
		tmp = make([]byte, 64<<10)
		req execRequest
	)
	for {
		n, err := unix.Read(fd, tmp)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return req, err
		}
		if n == 0 {
			break
		}
		buf = append(buf, tmp[:n]...)
	}
	if len(buf) == 0 {
		return req, errors.New("agent closed the control pipe before release")
	}
	if err := json.Unmarshal(buf, &req); err != nil {
		return req, err
	}
	return req, nil
}

func reportExecError(err error) {
	msg := []byte(err.Error())
	for len(msg) > 0 {
		n, werr := unix.Write(helperStatusFD, msg)
		if werr != nil && !errors.Is(werr, unix.EINTR) {
			return
		}
		if n > 0 {
			msg = msg[n:]
		}
	}
}
