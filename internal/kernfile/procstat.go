package kernfile

import (
	"bytes"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// ProcStat holds the fields of /proc/PID/stat that berth uses, numbered
// as in proc(5) ("/proc/pid/stat").
type ProcStat struct {
	State      byte   // field 3: R, S, D, Z, T, X, …
	PPID       int    // field 4
	Flags      uint64 // field 9: the kernel's PF_* flags of the process
	Threads    uint64 // field 20, num_threads
	StartTicks uint64 // field 22, starttime: clock ticks after boot
	RSSPages   uint64 // field 24, rss: resident pages
}

// ParseProcStat parses the content of /proc/PID/stat. The command name
// (field 2) may hold spaces and parentheses, so fields are counted from
// the last ')'.
//
// Errors: no command name, fewer than 24 fields, or a wanted field that
// is not a number (naming the field).
func ParseProcStat(b []byte) (ProcStat, error) {
	rest, err := afterComm(b)
	if err != nil {
		return ProcStat{}, err
	}
	var st ProcStat
	field := 3
	for f := range bytes.FieldsSeq(rest) {
		var v uint64
		switch field {
		case 3:
			st.State = f[0]
		case 4, 9, 20, 22, 24:
			var err error
			if v, err = Uint(f); err != nil {
				return ProcStat{}, fmt.Errorf("parse stat field %d: %w", field, err)
			}
		}
		switch field {
		case 4:
			st.PPID = int(v)
		case 9:
			st.Flags = v
		case 20:
			st.Threads = v
		case 22:
			st.StartTicks = v
		case 24:
			st.RSSPages = v
			return st, nil
		}
		field++
	}
	return ProcStat{}, fmt.Errorf("parse stat: %d fields, want ≥ 24", field-1)
}

// afterComm is the content of /proc/PID/stat from field 3 on: after the
// last ')', since the command name (field 2) may hold spaces and
// parentheses. Errors: no command name, or nothing after it.
func afterComm(b []byte) ([]byte, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return nil, fmt.Errorf("parse stat: no command name")
	}
	return b[i+2:], nil
}

// ProcStatField returns field n (numbered as in proc(5), n ≥ 3) of the
// content of /proc/PID/stat, for a field ProcStat does not hold (exit_code,
// field 52). Errors: no command name, or fewer than n fields.
func ProcStatField(b []byte, n int) (string, error) {
	rest, err := afterComm(b)
	if err != nil {
		return "", err
	}
	field := 3
	for f := range bytes.FieldsSeq(rest) {
		if field == n {
			return string(f), nil
		}
		field++
	}
	return "", fmt.Errorf("parse stat: %d fields, want ≥ %d", field-1, n)
}

// ReadProcStat reads and parses /proc/PID/stat with one open, read and
// close, into a buffer on the stack: what a start reads of its child
// (whether it has exec'd, its start time), without the allocations and
// fmt scanning of prometheus/procfs.
//
// Errors: the process is gone (an fs.PathError wrapping ENOENT or ESRCH),
// or the content does not parse (ParseProcStat).
func ReadProcStat(pid int) (ProcStat, error) {
	var buf [2048]byte // the line is a few hundred bytes: comm is at most 16
	b, err := ReadAt(unix.AT_FDCWD, "/proc/"+strconv.Itoa(pid)+"/stat", buf[:])
	if err != nil {
		return ProcStat{}, err
	}
	st, err := ParseProcStat(b)
	if err != nil {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}
