package recommend

import (
	"math"
	"time"
	"unsafe"
)

const (
	// cpuFloor is the least load, cores, a CPU sample is weighted by, so
	// that an idle job still has a distribution (VPA's least CPU bucket is
	// 0.001 core, its least sample weight 0.1 of a request).
	cpuFloor = 0.01
	// bumpRatio is what a censored figure is raised by: the CPU usage of
	// the periods in which the job was throttled (it wanted more than its
	// quota), and the memory it was OOM-killed at (it wanted more than its
	// limit): VPA's OOM bump-up ratio, 1.2 (--oom-bump-up-ratio).
	bumpRatio = 1.2
	// nearLimit is how close to a limit in force (memory.max,
	// memory.high) a peak may come before the page cache it holds is
	// taken as needed: near the limit the kernel reclaims, so the cache
	// at the peak may have been smaller than at either sample.
	nearLimit = 0.95
)

// history is one job's usage history: what a recommendation is computed
// from, 500 to 700 bytes (Model.Bytes). Times are Unix: nanoseconds
// for the samples' own, seconds elsewhere.
type history struct {
	// first is when the first sample was taken, Unix ns.
	first int64

	// The previous CPU sample.
	cpuAt                    int64 // Unix ns, 0 when none
	cpuUsage                 float64
	cpuPeriods, cpuThrottled uint64

	// The previous memory sample.
	memAt                int64 // Unix ns, 0 when none
	memPeak, memInactive uint64
	memOOM               uint64
	memStall, cpuStall   float64
	memHasInactive       bool
	memHasPressure       bool

	// cpu holds per-sample CPU usage in cores, weighted by load (the
	// usage, at least cpuFloor, times the sample's seconds).
	cpu histogram
	// mem holds per-sample working-set peaks in bytes, weight 1 each.
	mem histogram
	// peaks holds the highest working set of each of the last Intervals
	// memory aggregation intervals.
	peaks [Intervals]peakSlot
	// trend is the working set's decaying linear fit over time.
	trend trend
	// tot are the evidence's totals since first.
	tot totals
}

// peakSlot is one aggregation interval's highest working set.
type peakSlot struct {
	// at is when the peak was seen, Unix seconds; 0 for an empty slot.
	at uint32
	// kib is the peak, KiB, rounded up.
	kib uint32
	// oomKiB is, when processes were OOM-killed in the interval, the
	// memory they were killed at (the limit in force, or the peak when
	// higher), KiB; 0 when none were.
	oomKiB uint32
}

// totals are counts and sums since the history began.
type totals struct {
	// covered and memCovered are the time the CPU and the memory samples
	// cover, seconds (the sum of their intervals up to Params.MaxGap).
	covered, memCovered float64
	// cpuSamples and memSamples count the samples taken into account.
	cpuSamples, memSamples uint32
	// oomKills counts OOM kills.
	oomKills uint32
	// periods and throttled are CFS periods run and throttled, while a
	// quota was in force.
	periods, throttled uint64
	// memStall and cpuStall are the pressure stalls (PSI "some"),
	// seconds, summed over the memory samples that had pressure.
	memStall, cpuStall float64
	// pressure is set once a sample had pressure figures.
	pressure bool
}

// trend is a weighted least-squares line through the working set's
// samples, each sample's weight halving every memory half-life. The
// sums are kept about the newest sample (x = 0 there, older samples at
// negative x), so they stay small however long the history runs.
type trend struct {
	at                        float64 // Unix seconds of the newest sample
	sw, sx, sxx, sy, sxy, syy float64 // x in seconds, y in MiB
}

// add adds the point (t, y MiB) at Unix time t seconds.
func (r *trend) add(t, y, hl float64) {
	if r.sw > 0 {
		dt := t - r.at
		// Recentre on t (x' = x − dt), then decay.
		r.sxx += -2*dt*r.sx + dt*dt*r.sw
		r.sxy -= dt * r.sy
		r.sx -= dt * r.sw
		d := math.Exp2(-dt / hl)
		r.sw, r.sx, r.sxx, r.sy, r.sxy, r.syy = r.sw*d, r.sx*d, r.sxx*d, r.sy*d, r.sxy*d, r.syy*d
	}
	r.at = t
	r.sw++
	r.sy += y
	r.syy += y * y
}

// fit returns the line's slope (MiB per second) and its coefficient of
// determination R²; ok is false with fewer than three points' weight or
// no spread in time or value.
func (r *trend) fit() (slope, r2 float64, ok bool) {
	if r.sw < 3 {
		return 0, 0, false
	}
	mx, my := r.sx/r.sw, r.sy/r.sw
	vx, vy := r.sxx/r.sw-mx*mx, r.syy/r.sw-my*my
	cov := r.sxy/r.sw - mx*my
	if !(vx > 0) || !(vy > 0) {
		return 0, 0, false
	}
	return cov / vx, math.Min(1, cov*cov/(vx*vy)), true
}

// observeCPU takes a CPU sample into h.
func (h *history) observeCPU(p *Params, s CPUSample) {
	t := s.Time.UnixNano()
	if h.cpuAt != 0 && t <= h.cpuAt {
		return // a duplicate or out of order
	}
	if h.first == 0 || t < h.first {
		h.first = t
	}
	dt := float64(t-h.cpuAt) / 1e9
	fresh := h.cpuAt == 0 || dt > p.MaxGap.Seconds() ||
		s.UsageSeconds < h.cpuUsage || s.Periods < h.cpuPeriods || s.ThrottledPeriods < h.cpuThrottled
	if !fresh {
		h.addCPU(p, float64(t)/1e9, dt, (s.UsageSeconds-h.cpuUsage)/dt,
			s.Periods-h.cpuPeriods, s.ThrottledPeriods-h.cpuThrottled, s.QuotaCores)
	}
	h.cpuAt, h.cpuUsage, h.cpuPeriods, h.cpuThrottled = t, s.UsageSeconds, s.Periods, s.ThrottledPeriods
}

// addCPU adds the usage u (cores) of the dt seconds ending at t (Unix
// seconds), in which periods CFS periods ran and throttled of them hit the
// quota (cores, 0 none). The throttled periods' share of the interval is
// censored (the job wanted more than the quota, and how much more the
// kernel does not say): it is counted at bumpRatio times the quota.
func (h *history) addCPU(p *Params, t, dt, u float64, periods, throttled uint64, quota float64) {
	u = math.Max(u, 0)
	hl := p.CPUHalfLife.Seconds()
	share := 0.0
	if quota > 0 && periods > 0 && throttled > 0 {
		share = math.Min(1, float64(throttled)/float64(periods))
	}
	h.cpu.add(&cpuScheme, u, dt*math.Max(u, cpuFloor)*(1-share), t, hl)
	if share > 0 {
		need := math.Max(u, quota) * bumpRatio
		h.cpu.add(&cpuScheme, need, dt*need*share, t, hl)
	}
	h.tot.covered += dt
	h.tot.cpuSamples++
	if quota > 0 {
		h.tot.periods += periods
		h.tot.throttled += throttled
	}
}

// observeMemory takes a memory sample into h.
func (h *history) observeMemory(p *Params, s MemorySample) {
	t := s.Time.UnixNano()
	if h.memAt != 0 && t <= h.memAt {
		return
	}
	if h.first == 0 || t < h.first {
		h.first = t
	}
	first := h.memAt == 0
	if dt := float64(t-h.memAt) / 1e9; !first && dt <= p.MaxGap.Seconds() {
		h.tot.memCovered += dt
	}
	// The interval's peak: on the first sample any watermark counts (it
	// is a peak the job's cgroup reached).
	pk := s.CurrentBytes
	switch s.Peak {
	case PeakSinceLastSample:
		pk = max(pk, s.PeakBytes)
	case PeakSinceCreation:
		// Risen: the interval's peak. Fallen: the cgroup was made anew,
		// and its watermark is younger than the previous sample.
		if first || s.PeakBytes != h.memPeak {
			pk = max(pk, s.PeakBytes)
		}
	}
	// The working set at the peak: the page cache that was inactive at
	// both ends of the interval is taken as reclaimable at the peak too,
	// unless the peak came near a limit, where the kernel reclaims.
	ws := pk
	near := func(limit uint64) bool { return limit > 0 && float64(pk) >= nearLimit*float64(limit) }
	if s.HasInactiveFile && !near(s.LimitBytes) && !near(s.HighBytes) {
		inactive := s.InactiveFileBytes
		if !first && h.memHasInactive {
			inactive = min(inactive, h.memInactive)
		}
		ws = pk - min(pk, inactive)
	}
	if s.HasInactiveFile {
		ws = max(ws, s.CurrentBytes-min(s.CurrentBytes, s.InactiveFileBytes))
	}
	var oomAt uint64
	if !first && s.OOMKills > h.memOOM {
		h.tot.oomKills += uint32(min(s.OOMKills-h.memOOM, math.MaxUint32))
		oomAt = max(s.LimitBytes, pk)
	}
	if !first && s.HasPressure && h.memHasPressure {
		if d := s.MemoryStallSeconds - h.memStall; d > 0 {
			h.tot.memStall += d
		}
		if d := s.CPUStallSeconds - h.cpuStall; d > 0 {
			h.tot.cpuStall += d
		}
	}
	h.tot.pressure = h.tot.pressure || s.HasPressure

	sec := float64(t) / 1e9
	h.mem.add(&memScheme, float64(ws), 1, sec, p.MemoryHalfLife.Seconds())
	h.recordPeak(p, sec, ws, oomAt)
	h.trend.add(sec, float64(ws)/(1<<20), p.MemoryHalfLife.Seconds())
	h.tot.memSamples++

	h.memAt, h.memOOM = t, s.OOMKills
	h.memPeak = s.PeakBytes
	h.memInactive, h.memHasInactive = s.InactiveFileBytes, s.HasInactiveFile
	h.memStall, h.cpuStall, h.memHasPressure = s.MemoryStallSeconds, s.CPUStallSeconds, s.HasPressure
}

// kib is b in KiB, rounded up, at most math.MaxUint32 (4 TiB).
func kib(b uint64) uint32 { return uint32(min((b+1023)/1024, math.MaxUint32)) }

// recordPeak records the working set ws (and the OOM kill memory oomAt,
// 0 when none) seen at Unix time t seconds in its interval's slot.
func (h *history) recordPeak(p *Params, t float64, ws, oomAt uint64) {
	iv := int64(p.Interval / time.Second)
	idx := int64(t) / iv
	s := &h.peaks[idx%Intervals]
	if s.at == 0 || int64(s.at)/iv != idx {
		*s = peakSlot{}
	}
	if k := kib(ws); s.at == 0 || k > s.kib {
		s.at, s.kib = uint32(t), k
	}
	if oomAt > 0 {
		s.oomKiB = max(s.oomKiB, kib(oomAt))
	}
}

// windowPeak is the highest working set of the intervals still in the
// window at Unix time now (seconds), raised to bumpRatio times the memory
// of an OOM kill; bytes, 0 when there is none, with when it was seen and
// whether an OOM kill set it.
func (h *history) windowPeak(p *Params, now float64) (peak uint64, at uint32, oom bool) {
	iv := int64(p.Interval / time.Second)
	cur := int64(now) / iv
	for _, s := range h.peaks {
		if s.at == 0 || int64(s.at)/iv <= cur-Intervals {
			continue
		}
		v := uint64(s.kib) * 1024
		o := false
		if s.oomKiB > 0 {
			if b := uint64(float64(max(s.oomKiB, s.kib)) * 1024 * bumpRatio); b > v {
				v, o = b, true
			}
		}
		if v > peak {
			peak, at, oom = v, s.at, o
		}
	}
	return peak, at, oom
}

// sampled is the time the samples cover, seconds: the CPU samples', or
// the memory samples' when they cover more.
func (h *history) sampled() float64 { return math.Max(h.tot.covered, h.tot.memCovered) }

// last is when the newest sample was taken, Unix ns.
func (h *history) last() int64 { return max(h.cpuAt, h.memAt) }

// bytes is the memory h holds.
func (h *history) bytes() int {
	return int(unsafe.Sizeof(*h)) + 4*(cap(h.cpu.w)+cap(h.mem.w))
}
