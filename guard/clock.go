package guard

import (
	"time"

	"golang.org/x/sys/unix"
)

// boottime returns CLOCK_BOOTTIME now, nanoseconds: a clock every process
// of the system shares, that never jumps with the wall clock and, unlike
// CLOCK_MONOTONIC, keeps counting while the system is suspended (the
// store's lease does too), clock_gettime(2).
func boottime() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("clock_gettime(CLOCK_BOOTTIME): " + err.Error()) // Linux ≥ 2.6.39 has it
	}
	return ts.Nano()
}

// onBoottime converts t (read with its monotonic reading, as time.Now
// returns it) to CLOCK_BOOTTIME nanoseconds: now on that clock plus the
// time left until t.
func onBoottime(t time.Time) int64 {
	return boottime() + int64(time.Until(t))
}
