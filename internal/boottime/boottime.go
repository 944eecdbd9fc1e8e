package boottime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

var self struct {
	once   sync.Once
	offset int64
	err    error
}

// Now returns CLOCK_BOOTTIME of the initial time namespace now,
// nanoseconds: this process's reading less its namespace's boottime
// offset (0 outside a time namespace). It panics when the offset cannot
// be read (Offset's errors): a process that hands readings on calls
// Offset first and fails its start with that error instead.
func Now() int64 {
	off, err := Offset()
	if err != nil {
		panic(err.Error())
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("clock_gettime(CLOCK_BOOTTIME): " + err.Error()) // Linux ≥ 2.6.39 has it
	}
	return ts.Nano() - off
}

// Offset returns the boottime offset of this process's time namespace,
// nanoseconds, read once. Errors: /proc/self/timens_offsets cannot be
// read or parsed, or this process has not entered the time namespace the
// file describes (it called unshare(2) with CLONE_NEWTIME itself: the
// file is then its children's, /proc/self/ns/time_for_children).
func Offset() (int64, error) {
	self.once.Do(func() {
		t, terr := os.Readlink("/proc/self/ns/time")
		c, cerr := os.Readlink("/proc/self/ns/time_for_children")
		if terr == nil && cerr == nil && t != c {
			self.err = fmt.Errorf("time namespace: this process is in %s but its children in %s: /proc/self/timens_offsets describes theirs", t, c)
			return
		}
		self.offset, self.err = OffsetOf(os.Getpid())
	})
	return self.offset, self.err
}

// OffsetOf returns the boottime offset of the time namespace of process
// pid, nanoseconds, from /proc/PID/timens_offsets (time_namespaces(7):
// one "<clock> <seconds> <nanoseconds>" line per clock, relative to the
// initial namespace; the file is that of the namespace pid's children
// are born in, which is pid's own unless pid unshared a new one itself).
// A kernel without time namespaces (before Linux 5.6, or without
// CONFIG_TIME_NS) has no file: the offset is 0. Errors: pid does not
// exist, or the file cannot be read or parsed.
func OffsetOf(pid int) (int64, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/timens_offsets"
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat("/proc/" + strconv.Itoa(pid)); serr != nil {
			return 0, fmt.Errorf("time namespace of process %d: %w", pid, serr)
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("time namespace: %w", err)
	}
	off, err := parseOffsets(string(b))
	if err != nil {
		return 0, fmt.Errorf("time namespace: %s: %w", path, err)
	}
	return off, nil
}

// parseOffsets returns the boottime line's offset, nanoseconds, from the
// content of a timens_offsets file. The kernel names the clock
// "boottime"; a clock id (7, CLOCK_BOOTTIME) is accepted too, as the file
// accepts it on write. Errors: no boottime line, or one that is not
// "<clock> <seconds> <nanoseconds>" with 0 ≤ nanoseconds < 10⁹.
func parseOffsets(s string) (int64, error) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "boottime" && f[0] != strconv.Itoa(unix.CLOCK_BOOTTIME) {
			continue
		}
		if len(f) != 3 {
			return 0, fmt.Errorf("boottime line %q: want <clock> <seconds> <nanoseconds>", line)
		}
		sec, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("boottime line %q: seconds: %w", line, err)
		}
		nsec, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || nsec < 0 || nsec >= 1e9 {
			return 0, fmt.Errorf("boottime line %q: nanoseconds %q, want 0 to 999999999", line, f[2])
		}
		return sec*1e9 + nsec, nil
	}
	return 0, errors.New("no boottime line")
}

// tickNs is the length of one clock tick of /proc/PID/stat's starttime,
// ns: USER_HZ is 100 on every architecture Go builds berth for (proc(5):
// "expressed in clock ticks (divide by sysconf(_SC_CLK_TCK))").
const tickNs = int64(time.Second) / 100

// StartTicks converts a process's start time as this process reads it
// in /proc/PID/stat (field 22, clock ticks after boot: the kernel shows it
// shifted by the reader's time namespace offset) to clock ticks of the
// initial time namespace. It panics as Now does.
func StartTicks(read uint64) uint64 {
	off, err := Offset()
	if err != nil {
		panic(err.Error())
	}
	return ShiftTicks(read, off)
}

// ShiftTicks converts start ticks read in a time namespace of boottime
// offset off (ns) to ticks of the initial namespace. The kernel rounds
// the shifted time down to a tick, so the result is exact when off is a
// whole number of ticks (WholeTicks), and otherwise may be one tick more
// than the initial namespace's own reading.
func ShiftTicks(read uint64, off int64) uint64 {
	q := off / tickNs
	if off%tickNs < 0 {
		q-- // floor, for a negative offset
	}
	return uint64(int64(read) - q)
}

// WholeTicks reports whether offset off (ns) is a whole number of start
// time ticks, so that ShiftTicks is exact for readings shifted by it.
func WholeTicks(off int64) bool { return off%tickNs == 0 }
