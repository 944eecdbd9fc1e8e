package memwatch

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/berthd/berth/internal/kernfile"
	"golang.org/x/sys/unix"
)

// The helper process: this test binary run inside a job's cgroup with
// childEnv set (TestMain). Modes:
//
//   - thrash FILE: maps FILE and reads every page of it, over and over,
//     after dropping it from the page cache (so that its pages are faulted
//     in, and charged, inside the job's cgroup). With FILE larger than the
//     cgroup's limit the pages are reclaimed and refault: the job stalls
//     on memory (PSI "some" rises), on v1 as on v2.
//   - alloc USAGE_FILE: takes commands on standard input, one a line:
//     "up BYTES THRESHOLD" maps BYTES of anonymous memory and touches it
//     64 KiB at a time, reading USAGE_FILE after each step, then prints the
//     CLOCK_MONOTONIC time (ns) of its last read below THRESHOLD: the
//     usage crossed THRESHOLD after it. "down" prints the time and unmaps
//     the memory: the usage crosses back down after it.

// chunk is how much alloc touches between two reads of the usage.
const chunk = 64 << 10

func runChild(mode, arg string) int {
	var err error
	switch mode {
	case "thrash":
		err = thrash(arg)
	case "alloc":
		err = alloc(arg)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "memwatch test child:", err)
		return 1
	}
	return 0
}

func thrash(file string) error {
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		return err
	}
	m, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	for {
		for i := 0; i < len(m); i += 4096 {
			sink += m[i]
		}
	}
}

// sink keeps thrash's reads from being optimised away.
var sink byte

func alloc(usageFile string) error {
	var mem []byte
	in := bufio.NewScanner(os.Stdin)
	buf := make([]byte, 64)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 3 && f[0] == "up":
			n, err1 := strconv.Atoi(f[1])
			threshold, err2 := strconv.ParseUint(f[2], 10, 64)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("bad command %q", in.Text())
			}
			var err error
			mem, err = unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				return err
			}
			below := monoNow()
			for off := 0; off < n; off += chunk {
				for i := off; i < min(off+chunk, n); i += 4096 {
					mem[i] = 1
				}
				b, err := kernfile.ReadAt(unix.AT_FDCWD, usageFile, buf)
				if err != nil {
					return err
				}
				u, err := kernfile.Uint(b)
				if err != nil {
					return err
				}
				if u < threshold {
					below = monoNow()
				}
			}
			fmt.Println(below)
		case len(f) == 1 && f[0] == "down":
			fmt.Println(monoNow())
			if err := unix.Munmap(mem); err != nil {
				return err
			}
			mem = nil
		default:
			return fmt.Errorf("bad command %q", in.Text())
		}
	}
	return in.Err()
}

// monoNow is CLOCK_MONOTONIC in ns, the clock Go's monotonic readings
// use on Linux: comparable between processes.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
