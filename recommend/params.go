package recommend

import (
	"fmt"
	"time"
)

// Intervals is the number of memory aggregation intervals whose peaks a
// job's history keeps: VPA's default memory aggregation window, 8
// intervals (--memory-aggregation-interval-count). The memory
// recommendation is sized for the highest peak among them.
const Intervals = 8

// Params are the model's tunables. DefaultParams gives VPA's value where
// VPA has one, and says why where berth's differs.
type Params struct {
	// CPUHalfLife and MemoryHalfLife are the time after which a sample
	// weighs half as much as a new one: VPA's 24 h
	// (--cpu-histogram-decay-half-life, --memory-histogram-decay-half-life).
	CPUHalfLife, MemoryHalfLife time.Duration
	// Interval is the memory aggregation interval: the history keeps the
	// highest memory of each of the last Intervals intervals, and forgets
	// a peak once Intervals intervals have passed after it: VPA's 24 h
	// (--memory-aggregation-interval), so a peak counts for 8 days.
	Interval time.Duration
	// MaxGap is the longest time between two CPU samples whose difference
	// is still taken as one sample (an agent restart within it loses
	// nothing; a longer gap starts afresh from the next sample).
	MaxGap time.Duration
	// FullConfidence is how much sampled time a recommendation needs not
	// to be marked low-confidence: a day, as VPA's confidence reaches 1
	// (its history length in days, --confidence-interval-cpu and -memory).
	FullConfidence time.Duration
	// CPUPercentile is the percentile of CPU usage, weighted by load, that
	// cpu is sized for, before CPUMargin.
	CPUPercentile float64
	// CPUMargin is the fraction added to that percentile.
	CPUMargin float64
	// MemoryMargin is the fraction added to the peak for memory, before
	// rounding up to a readable size (which adds at most 2.5 %).
	MemoryMargin float64
	// MemoryHighMargin is the fraction added to the peak for memory_high,
	// before rounding up; it must be below MemoryMargin.
	MemoryHighMargin float64
}

// DefaultParams are the parameters berth runs with.
//
// Percentiles and margins, against the targets (memory at most 15 % above
// the observed peak and no OOM kill when the job runs again with it; cpu
// throttled in at most 1 % of CFS periods):
//
//   - memory is sized for the peak itself, not VPA's P90 of daily peaks:
//     a limit below any peak the job reached is an OOM kill waiting to
//     happen again (the kernel's OOM killer, unlike a request, is not
//     negotiable), and the kernel gives the exact peak (the watermark
//     memory.peak, v1 memory.max_usage_in_bytes), not a sample of it.
//     10 % above it covers what varies from run to run (allocator and GC
//     timing, kernel memory); rounding up to a readable size adds at most
//     2.5 % of that, so the slack stays under 12.75 %, within 15 %.
//   - memory_high is 3 % above the peak, rounded up: above anything the
//     job reached (no throttling in normal running), below memory by at
//     least 4 % (on v2 the kernel throttles and reclaims there, and PSI
//     rises, before the OOM killer at memory.max).
//   - cpu is sized for the 99th percentile of per-second usage weighted by
//     load, plus 15 % (VPA's margin): the periods in which a job is
//     throttled are those in which it would use more than its quota, and
//     weighting by load counts busy seconds as the kernel counts periods
//     (nr_periods counts only periods in which the group ran), so a job
//     idle most of the time is sized for its bursts. VPA's P90 over time
//     sizes a request, which may be exceeded; a quota may not.
func DefaultParams() Params {
	return Params{
		CPUHalfLife:      24 * time.Hour,
		MemoryHalfLife:   24 * time.Hour,
		Interval:         24 * time.Hour,
		MaxGap:           2 * time.Minute,
		FullConfidence:   24 * time.Hour,
		CPUPercentile:    0.99,
		CPUMargin:        0.15,
		MemoryMargin:     0.10,
		MemoryHighMargin: 0.03,
	}
}

// check returns an error naming the first parameter out of its bounds.
func (p Params) check() error {
	switch {
	case p.CPUHalfLife < time.Second || p.MemoryHalfLife < time.Second:
		return fmt.Errorf("recommend: half-lives must be at least 1s (cpu %v, memory %v)", p.CPUHalfLife, p.MemoryHalfLife)
	case p.Interval < time.Second:
		return fmt.Errorf("recommend: interval %v must be at least 1s", p.Interval)
	case p.MaxGap <= 0 || p.FullConfidence <= 0:
		return fmt.Errorf("recommend: max gap %v and full confidence %v must be > 0", p.MaxGap, p.FullConfidence)
	case !(p.CPUPercentile > 0 && p.CPUPercentile <= 1):
		return fmt.Errorf("recommend: cpu percentile %v must be in (0, 1]", p.CPUPercentile)
	case p.CPUMargin < 0 || p.MemoryMargin < 0 || p.MemoryHighMargin < 0:
		return fmt.Errorf("recommend: margins must be >= 0")
	case p.MemoryHighMargin >= p.MemoryMargin:
		return fmt.Errorf("recommend: memory_high margin %v must be below the memory margin %v", p.MemoryHighMargin, p.MemoryMargin)
	}
	return nil
}

// window is the time a memory peak counts for.
func (p *Params) window() time.Duration { return Intervals * p.Interval }
