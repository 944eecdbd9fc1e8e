package kernfile

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// ProcCgroup2 is the cgroup2 path of process pid: the path of the
// "0::PATH" line of /proc/PID/cgroup (cgroups(7), "/proc/[pid]/cgroup";
// Documentation/admin-guide/cgroup-v2.rst, "Processes"), relative to the
// root of the cgroup2 mount of the reader's cgroup namespace. On a hybrid
// host that line is the controller-less cgroup2's, beside one line per v1
// hierarchy; a v1-only host has none. One open, read and close, into a
// buffer on the stack: adopting 10,000 runs checks each one's leaf
// (guard.HeldRun.Verify), and prometheus/procfs's Cgroups parses every
// line into allocated records, three times the CPU per read here.
//
// Errors: the process is gone (an fs.PathError wrapping ENOENT or ESRCH),
// the file has no cgroup2 line (ErrNoCgroup2), or does not fit 4 KiB.
func ProcCgroup2(pid int) (string, error) {
	var buf [4096]byte // a line per hierarchy, each a path of the jobs' depth
	b, err := ReadAt(unix.AT_FDCWD, "/proc/"+strconv.Itoa(pid)+"/cgroup", buf[:])
	if err != nil {
		return "", err
	}
	for len(b) > 0 {
		var line []byte
		line, b = CutLine(b)
		if p, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			return string(p), nil
		}
	}
	return "", fmt.Errorf("/proc/%d/cgroup: %w", pid, ErrNoCgroup2)
}

// ErrNoCgroup2 is ProcCgroup2's error for a process without a cgroup2
// line: a host with v1 hierarchies only.
var ErrNoCgroup2 = errors.New("no cgroup2 line (0::)")
