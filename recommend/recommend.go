package recommend

import (
	"fmt"
	"math"
	"time"

	"github.com/berthd/berth/limits"
)

// Host is what a recommendation needs to know of the job's host.
type Host struct {
	// CPUs is the number of CPUs online: cpu may not exceed it (berth's
	// validation refuses more). 0: no cap.
	CPUs int `json:"cpus"`
	// MemoryHigh is true where the kernel enforces memory.high (cgroup
	// v2). On cgroup v1 memory_high is only the threshold of the
	// memory_pressure action, not enforced.
	MemoryHigh bool `json:"memory_high"`
}

// Recommendation is one job's recommended limits with the evidence for
// them. A zero CPU or Memory means no recommendation for it (no sample
// of that kind yet).
type Recommendation struct {
	// Job is the job's ID.
	Job string `json:"job"`
	// CPU is the recommended cpu, cores, in steps of 0.01.
	CPU float64 `json:"cpu,omitempty"`
	// Memory and MemoryHigh are the recommended memory and memory_high,
	// bytes, rounded up to a readable size (a multiple of a power of two
	// of at most 2.5 % of the size).
	Memory     int64 `json:"memory,omitempty"`
	MemoryHigh int64 `json:"memory_high,omitempty"`
	// Rule is the percentile and margins they were computed with.
	Rule Rule `json:"rule"`
	// Evidence is what they were computed from.
	Evidence Evidence `json:"evidence"`
	// VPA is what Kubernetes' Vertical Pod Autoscaler, with its defaults,
	// would recommend from the same samples.
	VPA VPA `json:"vpa"`
	// LowConfidence is set when the samples cover less than
	// Params.FullConfidence; Notes say so, and what else to know.
	LowConfidence bool     `json:"low_confidence,omitempty"`
	Notes         []string `json:"notes,omitempty"`
}

// Rule is the percentile and margins of a recommendation (Params').
type Rule struct {
	CPUPercentile    float64 `json:"cpu_percentile"`
	CPUMargin        float64 `json:"cpu_margin"`
	MemoryMargin     float64 `json:"memory_margin"`
	MemoryHighMargin float64 `json:"memory_high_margin"`
}

// MemorySlack is how far Memory is above the observed peak, as a
// fraction (0.12 is 12 %); 0 without both.
func (r Recommendation) MemorySlack() float64 {
	if r.Memory == 0 || r.Evidence.MemoryPeak == 0 {
		return 0
	}
	return float64(r.Memory)/float64(r.Evidence.MemoryPeak) - 1
}

// Evidence is what a recommendation rests on. Totals run from Since;
// percentiles are of the decayed histograms (recent samples weigh more).
type Evidence struct {
	// Since and Until are the first and the newest sample's times.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// SampledSeconds is the time the samples cover (the CPU samples', or
	// the memory samples' when more), seconds; less than Until − Since
	// when the agent was down or the job stopped.
	SampledSeconds float64 `json:"sampled_seconds"`
	// Confidence is SampledSeconds over Params.FullConfidence, at most 1.
	Confidence float64 `json:"confidence"`
	// CPUSamples and MemorySamples count the samples.
	CPUSamples    uint64 `json:"cpu_samples"`
	MemorySamples uint64 `json:"memory_samples"`
	// CPUP90 is the 90th percentile of per-sample CPU usage over time,
	// CPUTarget the percentile over load that cpu is sized for
	// (Rule.CPUPercentile), CPUMax the highest usage; cores, each the
	// upper bound of its 5 %-wide bucket.
	CPUP90    float64 `json:"cpu_p90"`
	CPUTarget float64 `json:"cpu_target"`
	CPUMax    float64 `json:"cpu_max"`
	// Periods and ThrottledPeriods are the CFS periods the job ran and
	// was throttled in while a cpu limit was in force.
	Periods          uint64 `json:"periods"`
	ThrottledPeriods uint64 `json:"throttled_periods"`
	// MemoryPeak is the highest working set in the window (the last
	// Intervals aggregation intervals), bytes, seen at MemoryPeakAt; when
	// MemoryPeakOOM, it is the memory of an OOM kill times 1.2, not a
	// usage seen.
	MemoryPeak    int64     `json:"memory_peak"`
	MemoryPeakAt  time.Time `json:"memory_peak_at"`
	MemoryPeakOOM bool      `json:"memory_peak_oom,omitempty"`
	// MemoryP90 is the 90th percentile of the per-sample peaks, bytes
	// (its bucket's upper bound, at most MemoryPeak).
	MemoryP90 int64 `json:"memory_p90"`
	// MemoryTrend is the working set's growth, bytes per hour, of a line
	// fitted through its samples (recent ones weigh more), with its R².
	MemoryTrend   float64 `json:"memory_trend_per_hour"`
	MemoryTrendR2 float64 `json:"memory_trend_r2"`
	// OOMKills counts OOM kills in the job's cgroup.
	OOMKills uint64 `json:"oom_kills"`
	// MemoryStallSeconds and CPUStallSeconds are the pressure stall
	// totals (PSI "some"), seconds; valid when HasPressure.
	MemoryStallSeconds float64 `json:"memory_stall_seconds"`
	CPUStallSeconds    float64 `json:"cpu_stall_seconds"`
	HasPressure        bool    `json:"has_pressure"`
}

// ThrottledShare is ThrottledPeriods over Periods (0 without periods).
func (e Evidence) ThrottledShare() float64 {
	if e.Periods == 0 {
		return 0
	}
	return float64(e.ThrottledPeriods) / float64(e.Periods)
}

// VPA is what the Vertical Pod Autoscaler's recommender, with its default
// flags, would set as the target from the same samples: cpu the 90th
// percentile of CPU samples (counted by time; VPA weights each by the
// container's request, the same for all) plus 15 %, at least 25
// millicores; memory the 90th percentile of the peaks of its 24 h
// aggregation intervals (each decayed by its age; an OOM kill's interval
// at the memory killed at plus 20 %, at least 100 MiB more) plus 15 %, at
// least 250 MiB. CPUNoFloor and MemoryNoFloor leave out the floors, which
// decide for small jobs.
type VPA struct {
	CPU           float64 `json:"cpu"`
	Memory        int64   `json:"memory"`
	CPUNoFloor    float64 `json:"cpu_no_floor"`
	MemoryNoFloor int64   `json:"memory_no_floor"`
}

// VPA's defaults (its recommender's flags).
const (
	vpaMargin     = 0.15             // --recommendation-margin-fraction
	vpaPercentile = 0.9              // --target-cpu-percentile, --target-memory-percentile
	vpaMinCPU     = 0.025            // --pod-recommendation-min-cpu-millicores 25
	vpaMinMemory  = 250 << 20        // --pod-recommendation-min-memory-mb 250
	vpaOOMMinBump = 100 << 20        // --oom-min-bump-up-bytes
	cpuStep       = 0.01             // berth's cpu resolution, cores
	minPageStep   = 4 << 10          // the least memory rounding step: a page
	readableShare = 0.025            // memory is rounded up by less than this share
	lowShare      = 0.01             // throttling and stalls above this share are noted
	stallNote     = 0.10             // cpu stalls above this share are noted
	trendR2       = 0.8              // a memory trend this linear is noted…
	trendGrowth   = 0.10             // …when it grew by this share of the peak
	mib           = float64(1 << 20) // bytes
	hour          = float64(3600)    // seconds
)

// recommend computes h's recommendation at now.
func (h *history) recommend(p *Params, now time.Time, cur limits.Limits, host Host) Recommendation {
	nowS := float64(now.UnixNano()) / 1e9
	r := Recommendation{Rule: Rule{p.CPUPercentile, p.CPUMargin, p.MemoryMargin, p.MemoryHighMargin}}
	e := &r.Evidence
	e.Since = time.Unix(0, h.first)
	e.Until = time.Unix(0, h.last())
	e.SampledSeconds = h.sampled()
	e.Confidence = math.Min(1, e.SampledSeconds/p.FullConfidence.Seconds())
	e.CPUSamples, e.MemorySamples = uint64(h.tot.cpuSamples), uint64(h.tot.memSamples)
	e.Periods, e.ThrottledPeriods = h.tot.periods, h.tot.throttled
	e.OOMKills = uint64(h.tot.oomKills)
	e.MemoryStallSeconds, e.CPUStallSeconds, e.HasPressure = h.tot.memStall, h.tot.cpuStall, h.tot.pressure
	notef := func(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

	// cpu.
	h.cpu.compact()
	if !h.cpu.empty() {
		e.CPUP90 = h.cpu.percentile(&cpuScheme, 0.9, byTime)
		e.CPUTarget = h.cpu.percentile(&cpuScheme, p.CPUPercentile, nil)
		e.CPUMax = h.cpu.percentile(&cpuScheme, 1, nil)
		period := cur.Period()
		least := float64(limits.MinCPUQuotaMicros) / float64(period.Microseconds())
		r.CPU = math.Max(roundUp(e.CPUTarget*(1+p.CPUMargin), cpuStep), roundUp(least, cpuStep))
		if host.CPUs > 0 && r.CPU > float64(host.CPUs) {
			notef("cpu %.2f would be more than the %d CPUs of this host: set to %d (or leave cpu unset)", r.CPU, host.CPUs, host.CPUs)
			r.CPU = float64(host.CPUs)
		}
		if s := e.ThrottledShare(); s > lowShare {
			notef("throttled in %.1f %% of %d CFS periods under its cpu limit: what it wanted then is counted at %.1f × the quota", 100*s, e.Periods, bumpRatio)
		}
		if e.HasPressure && h.tot.memCovered > 0 {
			if s := e.CPUStallSeconds / h.tot.memCovered; s > stallNote {
				notef("waited for a CPU %.0f %% of the time (cpu.pressure): it may want more than it used", 100*s)
			}
		}
	}

	// memory and memory_high.
	peak, at, oom := h.windowPeak(p, nowS)
	if peak > 0 {
		e.MemoryPeak, e.MemoryPeakAt, e.MemoryPeakOOM = int64(peak), time.Unix(int64(at), 0), oom
		h.mem.compact()
		e.MemoryP90 = min(int64(h.mem.percentile(&memScheme, 0.9, nil)), e.MemoryPeak)
		raw := float64(peak) * (1 + p.MemoryMargin)
		step := readableStep(raw)
		r.Memory = max(ceilTo(raw, step), limits.MinMemory)
		r.MemoryHigh = ceilTo(float64(peak)*(1+p.MemoryHighMargin), step)
		if r.MemoryHigh >= r.Memory {
			r.MemoryHigh = r.Memory - step
		}
		if r.MemoryHigh < int64(peak) {
			r.MemoryHigh = 0
		}
		if e.OOMKills > 0 {
			notef("%d OOM kills: memory is sized for %.1f × the memory they were killed at where that is above what was seen", e.OOMKills, bumpRatio)
		}
		if e.HasPressure && h.tot.memCovered > 0 {
			if s := e.MemoryStallSeconds / h.tot.memCovered; s > lowShare {
				notef("stalled on memory %.1f %% of the time (memory.pressure): reclaim or memory.high held it back, so it may want more than it used", 100*s)
			}
		}
		if slope, r2, ok := h.trend.fit(); ok {
			e.MemoryTrend, e.MemoryTrendR2 = slope*mib*hour, r2
			span := math.Min(e.Until.Sub(e.Since).Seconds(), p.window().Seconds())
			if slope > 0 && r2 >= trendR2 && slope*mib*span >= trendGrowth*float64(peak) {
				left := (float64(r.Memory) - float64(peak)) / (slope * mib)
				notef("the working set grew %s/h through the history (R² %.2f) without levelling off: a leak, or a warm-up not over; at that rate it reaches memory = %s %s after its peak",
					human(slope*mib*hour), r2, formatBytes(r.Memory), time.Duration(left*1e9).Round(time.Minute))
			}
		}
	}
	if !h.cpu.empty() || peak > 0 {
		if e.Confidence < 1 {
			r.LowConfidence = true
			notef("low confidence: %s of samples, less than the %s a daily cycle needs; the figures are what was seen, not raised for it",
				time.Duration(e.SampledSeconds*1e9).Round(time.Second), p.FullConfidence)
		}
	}
	r.VPA = h.vpa(p, nowS)
	return r
}

// byTime turns a CPU bucket's weight (load × seconds) into seconds: the
// samples of a bucket had about the same usage, its midpoint.
func byTime(i int, w float64) float64 {
	mid := (cpuScheme.start(i) + cpuScheme.end(i)) / 2
	return w / math.Max(mid, cpuFloor)
}

// vpa computes VPA's target from h at Unix time now, seconds.
func (h *history) vpa(p *Params, now float64) VPA {
	var v VPA
	if !h.cpu.empty() {
		v.CPUNoFloor = math.Ceil(h.cpu.percentile(&cpuScheme, vpaPercentile, byTime)*(1+vpaMargin)*1000) / 1000
		v.CPU = math.Max(v.CPUNoFloor, vpaMinCPU)
	}
	iv := int64(p.Interval / time.Second)
	cur := int64(now) / iv
	var hist histogram
	for _, s := range h.peaks {
		idx := int64(s.at) / iv
		if s.at == 0 || idx <= cur-Intervals {
			continue
		}
		x := float64(s.kib) * 1024
		if s.oomKiB > 0 {
			used := math.Max(float64(s.oomKiB)*1024, x)
			x = math.Max(x, math.Max(used+vpaOOMMinBump, used*bumpRatio))
		}
		// VPA adds an interval's peak at the interval's end.
		hist.add(&vpaMemScheme, x, 1, float64((idx+1)*iv), p.MemoryHalfLife.Seconds())
	}
	if !hist.empty() {
		v.MemoryNoFloor = int64(math.Ceil(hist.percentile(&vpaMemScheme, vpaPercentile, nil) * (1 + vpaMargin)))
		v.Memory = max(v.MemoryNoFloor, vpaMinMemory)
	}
	return v
}

// roundUp is x rounded up to a multiple of step (0.01: two decimals, and
// printed so).
func roundUp(x, step float64) float64 {
	n := math.Ceil(x/step - 1e-9)
	return math.Round(n*step*1e6) / 1e6
}

// readableStep is the rounding step for a memory size of about b bytes:
// the largest power of two that is at most 2.5 % of it, at least a page.
func readableStep(b float64) int64 {
	step := int64(minPageStep)
	for float64(2*step) <= readableShare*b {
		step *= 2
	}
	return step
}

// ceilTo is b rounded up to a multiple of step.
func ceilTo(b float64, step int64) int64 {
	return int64(math.Ceil(b/float64(step))) * step
}
