// Package recommend sizes a job's limits from what it used: per job, a
// compact decaying history of CPU and memory usage (after the Vertical
// Pod Autoscaler's recommender, and Google's Autopilot that it follows),
// the recommended cpu, memory and memory_high with the evidence for
// them, what VPA's defaults would say from the same samples, the TOML
// that berth's configuration accepts, and the file in data_dir that
// keeps the histories across agent restarts and upgrades.
//
// # Samples
//
// The agent feeds the model from one place: one goroutine, on one ticker
// for every job, reading each job's cgroup (no goroutine, timer or
// descriptor per job). Two kinds of sample, at two rates:
//
//   - CPUSample, every second: the CPU time used, and the CFS periods run
//     and throttled (cgroup2 cpu.stat: usage_usec, nr_periods,
//     nr_throttled, one file on v2; on a v1 or hybrid host the cgroup2 or
//     cpuacct usage and v1 cpu.stat). A quota is enforced per CFS period
//     (100 ms by default), so what a cpu limit must cover is the usage of
//     the busy periods, not an average over minutes: a job that works 3 s
//     in every 30 averages a tenth of what it needs while it works. One
//     second is Autopilot's resolution; the throttling counters cover
//     what is shorter (below).
//   - MemorySample, every 10 to 30 seconds: the memory charged, the
//     kernel's watermark since the previous sample (v1
//     memory.max_usage_in_bytes, reset by writing to it; v2 memory.peak,
//     reset through a descriptor held open since Linux 6.12, or read as a
//     peak since the cgroup was made before), the inactive page cache
//     (memory.stat), the limits in force, the OOM kill count and the
//     pressure stall totals (PSI). The watermark catches every spike
//     between two samples, so memory needs no faster rate.
//
// # The history
//
// CPU usage goes into a histogram of per-second usage, each sample
// weighted by its load (usage × seconds, at least 0.01 core): the kernel
// counts throttled periods among the periods in which the job ran, so
// busy seconds must count more than idle ones, as Autopilot weights its
// samples by load. Memory goes into a histogram of per-sample working-set
// peaks (the charge less the page cache that was inactive at both ends
// of the interval, as cAdvisor and VPA count the working set; near a
// limit, where the kernel reclaims, the whole charge), and into the
// highest peak of each of the last 8 aggregation intervals of 24 hours
// (VPA's memory window), which the memory recommendation is sized for.
//
// Both histograms decay as VPA's: a sample's weight halves every
// half-life (24 h by default, Params), so that usage of a week ago still
// counts and that of a month ago no longer does. Their buckets are
// exponential, 5 % wider each (VPA's scheme; berth's memory buckets start
// at 1 MiB, not VPA's 10 MB), and only the buckets from the lowest to the
// highest used are kept. With the samples' previous counters, the peaks
// of the 8 intervals, a decaying linear fit of the working set (a leak
// shows as a trend) and the evidence's totals, a job's history is 500 to
// 700 bytes in the agent and 300 to 500 in the file (BENCHMARKS.md).
//
// A figure the kernel censored is raised, as VPA raises the memory of an
// OOM kill: the seconds in which the job was throttled count at 1.2 times
// its quota, and an interval with an OOM kill counts at 1.2 times the
// memory it was killed at.
//
// # The recommendation
//
// memory is the highest working set of the window plus 10 %, rounded up
// to a readable size (a multiple of a power of two of at most 2.5 % of it, so
// "80MiB" rather than "80.7MiB"): never below a peak the job reached, and
// at most 12.75 % above it. memory_high is the peak plus 3 %, rounded up:
// above anything the job used and at least 4 % below memory, so that on
// cgroup v2 the kernel throttles and reclaims (and PSI rises, for
// memory_pressure) before the OOM killer. cpu is the 99th percentile of
// the load-weighted CPU histogram plus 15 % (VPA's margin), rounded up to
// 0.01 core, at least the kernel's least quota (1000 µs per period) and
// at most the host's CPUs. DefaultParams says why these and not VPA's P90
// plus 15 %, whose figures are reported beside (VPA).
//
// A recommendation from less than a day of samples is marked low
// confidence: a daily peak may not have been seen. The figures are not
// raised for it: VPA, too, applies its confidence multiplier (1 + 1/days
// of history) to its upper bound only, never to the target it
// recommends; berth's target already covers every peak seen.
//
// Applying a recommendation stays the operator's: Render's TOML replaces
// a connector's limits table in the file, and a reload writes the limits
// in place.
package recommend
