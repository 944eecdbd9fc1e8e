package guard

import (
	"time"

	"github.com/berthd/berth/internal/boottime"
)

// onBoottime converts t (read with its monotonic reading, as time.Now
// returns it) to CLOCK_BOOTTIME of the initial time namespace,
// nanoseconds (boottime.Now): now on that clock plus the time left until
// t. The guard reads the same clock, whatever time namespace either runs
// in.
func onBoottime(t time.Time) int64 {
	return boottime.Now() + int64(time.Until(t))
}
