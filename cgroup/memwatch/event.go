package memwatch

import "time"

// Kind is what an Event says.
type Kind uint8

const (
	// Over: the rule holds. PSI: the stall share held Limit for Duration
	// (reported again after each further Duration it holds). Threshold:
	// the job's usage crossed above High (also at Watch when it is above
	// already).
	Over Kind = iota + 1
	// Under: the job's usage went back below High (Threshold only: v1
	// signals a crossing in either direction).
	Under
	// Gone: the job's cgroup was removed (PSI: EPOLLERR on the pressure
	// file; Threshold: the kernel signals the eventfd when the cgroup goes
	// offline). The watch has ended and its descriptor is closed.
	Gone
	// Failed: the watch could not read what the kernel said (Event.Err).
	// The watch has ended and its descriptor is closed.
	Failed
)

// String is "over", "under", "gone" or "failed".
func (k Kind) String() string {
	switch k {
	case Over:
		return "over"
	case Under:
		return "under"
	case Gone:
		return "gone"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// final reports whether k ends its watch.
func (k Kind) final() bool { return k == Gone || k == Failed }

// Event is one thing a watch saw, with the figures that made it.
type Event struct {
	// Handle is the watch the event is of (compare it with the handle
	// Watch returned: an event is never delivered after its handle's
	// Close returned).
	Handle *Handle
	Kind   Kind
	// At is when the watcher woke with the kernel's notification (a
	// time.Now reading, with its monotonic clock).
	At time.Time

	// Held (PSI, Over) is the span over which the stall held the rule:
	// at least Rule.Duration less a tenth of the window.
	Held time.Duration
	// Avg10 (PSI, Over) is the "some" avg10 of memory.pressure at the
	// event: the kernel's stall share over the last 10 s, in percent,
	// which the kernel updates every 2 s (so it may lag a short stall).
	Avg10 float64
	// Stall (PSI, Over) is the "some" total of memory.pressure at the
	// event: the job's cgroup's cumulative stall time.
	Stall time.Duration

	// Usage (Threshold) is memory.usage_in_bytes read at the event, in
	// bytes.
	Usage uint64

	// Err (Failed) says what could not be read.
	Err error
}

// merge folds e, a newer event of the same handle, into p, one the owner
// has not drained yet: the owner gets one event per handle and drain. A
// final event (Gone, Failed) is kept over anything; otherwise Over is kept
// over Under (a crossing is never lost: its figures stay those of the
// Over), and a newer event of the same kind replaces the older.
func merge(p, e Event) Event {
	switch {
	case p.Kind.final():
		return p
	case e.Kind.final():
		return e
	case p.Kind == Over && e.Kind == Under:
		return p
	}
	return e
}
