package recommend

import "time"

// CPUSample is one reading of a job's CPU counters, taken often (every
// second: see the package documentation for why). Counters are cumulative,
// as the kernel keeps them; the model takes the difference from the job's
// previous sample, and starts afresh when a counter goes down (the cgroup
// was made anew) or the gap exceeds Params.MaxGap.
type CPUSample struct {
	// Time is when the counters were read.
	Time time.Time
	// UsageSeconds is the CPU time the job's cgroup has used, seconds
	// (cgroup.Usage.CPUUsageSeconds: cgroup2 cpu.stat usage_usec, v1
	// cpuacct.usage).
	UsageSeconds float64
	// Periods and ThrottledPeriods are the CFS periods in which the group
	// ran and those in which it hit its quota (cpu.stat nr_periods,
	// nr_throttled); the kernel counts them only while a quota is set.
	Periods, ThrottledPeriods uint64
	// QuotaCores is the CPU quota in force, cores (quota / period), 0 when
	// unlimited (cgroup.Limits.CPUQuotaCores).
	QuotaCores float64
}

// PeakKind says what a MemorySample's PeakBytes is the highest usage of.
type PeakKind uint8

const (
	// PeakNone: no watermark was read; the current usage stands for the
	// interval's peak (spikes between samples are missed).
	PeakNone PeakKind = iota
	// PeakSinceLastSample: the watermark was reset right after the
	// previous sample was read, so it is the peak of the interval (v1
	// memory.max_usage_in_bytes, reset by any write; v2 memory.peak read
	// and reset through one descriptor kept open, Linux 6.12 and later).
	PeakSinceLastSample
	// PeakSinceCreation: the watermark is never reset (v2 memory.peak
	// before Linux 6.12, which cannot be reset); when it has risen since
	// the previous sample, it is the interval's peak exactly, otherwise
	// the interval stayed below it and the current usage stands for it.
	PeakSinceCreation
)

// MemorySample is one reading of a job's memory, OOM and pressure
// figures, taken less often than CPU (every 10 to 30 s): the kernel's
// watermark catches the peaks between two readings.
type MemorySample struct {
	// Time is when the figures were read.
	Time time.Time
	// CurrentBytes is the memory charged to the job's cgroup, page cache
	// included (v2 memory.current, v1 memory.usage_in_bytes).
	CurrentBytes uint64
	// PeakBytes is the highest CurrentBytes the kernel recorded (see
	// Peak for since when).
	PeakBytes uint64
	// Peak says what PeakBytes covers.
	Peak PeakKind
	// InactiveFileBytes is the page cache on the inactive LRU list, which
	// the kernel reclaims first (v2 memory.stat inactive_file, v1
	// memory.stat total_inactive_file); valid when HasInactiveFile. The
	// working set, what must fit under the limit, is the charge less it
	// (as cAdvisor and VPA count it).
	InactiveFileBytes uint64
	HasInactiveFile   bool
	// LimitBytes and HighBytes are the memory limit (memory.max, v1
	// memory.limit_in_bytes) and memory.high in force, 0 when none.
	LimitBytes, HighBytes uint64
	// OOMKills counts the processes OOM-killed in the group (cgroup.Usage
	// OOMKills).
	OOMKills uint64
	// MemoryStallSeconds and CPUStallSeconds are the group's pressure
	// stall totals, the "some" lines of memory.pressure and cpu.pressure
	// (cgroup.Pressure); valid when HasPressure.
	MemoryStallSeconds, CPUStallSeconds float64
	HasPressure                         bool
}
