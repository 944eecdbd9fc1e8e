package replay

import (
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// slice is how often Follow sets its memory and accrues CPU work.
const slice = 10 * time.Millisecond

// Follow makes the calling process follow s for d: it holds s.Memory(t)
// bytes of anonymous memory, every page touched (so charged to its
// cgroup), and does s.CPU(t) of a core's work on one locked OS thread.
// CPU work is owed per slice of wall time and paid by spinning; work
// that could not be done in its slice (the thread was throttled or
// preempted) is done as soon as it can be, as a job with work queued
// catches up, which is the re-run's model in Run. The Go runtime's own
// memory and threads come on top.
//
// Errors: the memory cannot be mapped, or the thread's CPU clock read.
func Follow(s Shape, d time.Duration) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	page := os.Getpagesize()
	size := int(s.MaxMemory(d)) + page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("follow %s: map %d bytes: %w", s.Name, size, err)
	}
	defer unix.Munmap(mem)
	used := func() (float64, error) {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			return 0, fmt.Errorf("follow %s: thread CPU clock: %w", s.Name, err)
		}
		return float64(ts.Nano()) / 1e9, nil
	}
	base, err := used()
	if err != nil {
		return err
	}
	start := time.Now()
	touched, owed, next := 0, 0.0, time.Duration(0)
	for {
		t := time.Since(start)
		if t >= d {
			return nil
		}
		// Memory: touch up to the target, or give back what is above it.
		want := min(int(s.Memory(t))/page*page, size)
		for ; touched < want; touched += page {
			mem[touched] = 1
		}
		if want < touched {
			if err := unix.Madvise(mem[want:touched], unix.MADV_DONTNEED); err != nil {
				return fmt.Errorf("follow %s: release memory: %w", s.Name, err)
			}
			touched = want
		}
		// CPU: accrue the work of every slice begun, then work until it
		// is paid or the slice is over.
		for ; next <= t; next += slice {
			owed += s.CPU(next) * slice.Seconds()
		}
		for time.Since(start) < next {
			u, err := used()
			if err != nil {
				return err
			}
			if u-base >= owed {
				time.Sleep(time.Until(start.Add(next)))
				break
			}
		}
	}
}
