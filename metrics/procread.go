package metrics

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"

	"github.com/berthd/berth/internal/kernfile"
	"golang.org/x/sys/unix"
)

// This file reads the few /proc/PID fields the procfs collector reports,
// straight into a pooled buffer: one open, one read and one close per file
// and no allocation beyond the path. (prometheus/procfs parses every field
// of each file with fmt scanning and allocates per read, several times the
// cost of the read itself at a thousand jobs per scrape.) Field positions
// and names: proc(5).

// pageSize converts /proc/PID/stat rss (pages) to bytes.
var pageSize = uint64(os.Getpagesize())

// procBufs are scratch buffers for one /proc file: /proc/PID/status, the
// longest read here, is about 1.5 KiB.
var procBufs = sync.Pool{New: func() any { b := make([]byte, 8192); return &b }}

// procDir is an fd of /proc, opened once: a file is opened relative to it
// ("PID/stat"), which skips resolving "/proc" on every open (about half
// the cost of the open, measured).
var procDir = sync.OnceValues(func() (int, error) {
	return unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
})

// readProc reads /proc/<pid>/<name> into buf. Files of procfs are
// seq_files: a read with room to spare returns the whole content.
func readProc(pid int, name string, buf []byte) ([]byte, error) {
	dir, err := procDir()
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/proc", Err: err}
	}
	var p kernfile.Path
	return kernfile.ReadPath(dir, p.AddInt(pid).Add("/").Add(name), buf)
}

// readStat reads /proc/PID/stat (kernfile.ParseProcStat: the fields after
// the command name, which may hold spaces and parentheses).
func readStat(pid int, buf []byte) (kernfile.ProcStat, error) {
	b, err := readProc(pid, "stat", buf)
	if err != nil {
		return kernfile.ProcStat{}, err
	}
	st, err := kernfile.ParseProcStat(b)
	if err != nil {
		return kernfile.ProcStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

var (
	ioKeys     = []string{"read_bytes", "write_bytes"}
	statusKeys = []string{"voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"}
)

// readIO returns read_bytes and write_bytes of /proc/PID/io.
func readIO(pid int, buf []byte) (read, write uint64, err error) {
	b, err := readProc(pid, "io", buf)
	if err != nil {
		return 0, 0, err
	}
	var v [2]uint64
	if err := kernfile.Keyed(b, ':', ioKeys, v[:]); err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/io: %w", pid, err)
	}
	return v[0], v[1], nil
}

// readCtxSwitches returns the voluntary and involuntary context switches
// of /proc/PID/status.
func readCtxSwitches(pid int, buf []byte) (vol, invol uint64, err error) {
	b, err := readProc(pid, "status", buf)
	if err != nil {
		return 0, 0, err
	}
	var v [2]uint64
	if err := kernfile.Keyed(b, ':', statusKeys, v[:]); err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return v[0], v[1], nil
}

// countFDs counts the open file descriptors of pid: the size fstatat(2)
// gives /proc/PID/fd (Linux ≥ 6.2 reports the count there), looked up
// relative to the held /proc fd (procDir) as readProc's files are, else
// the entries of that directory.
//
// Errors: the directory cannot be stat'ed or listed (an fs.PathError;
// ENOENT or ESRCH when the process has exited).
func countFDs(pid int) (int, error) {
	name := strconv.Itoa(pid) + "/fd"
	dirFD, err := procDir()
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: "/proc", Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirFD, name, &st, 0); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: "/proc/" + name, Err: err}
	}
	if st.Size > 0 {
		return int(st.Size), nil
	}
	f, err := os.Open("/proc/" + name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(256)
		n += len(names)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
