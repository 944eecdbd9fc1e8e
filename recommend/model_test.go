package recommend

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/limits"
)

var t0 = time.Unix(1_800_000_000, 0)

// feed drives one job of a model with samples, as the agent's sampler
// would: counters accumulate, time moves on.
type feed struct {
	t                  *testing.T
	m                  *Model
	job                string
	at                 time.Time
	usage              float64
	periods, throttled uint64
	oom                uint64
}

func newFeed(t *testing.T, p Params) *feed {
	t.Helper()
	m, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	f := &feed{t: t, m: m, job: "j", at: t0}
	m.ObserveCPU(f.job, CPUSample{Time: f.at})
	return f
}

// cpu runs the job at cores for d in 1 s samples under quota (0: none),
// throttled in share of its periods.
func (f *feed) cpu(d time.Duration, cores, quota, share float64) {
	for end := f.at.Add(d); f.at.Before(end); {
		f.at = f.at.Add(time.Second)
		f.usage += cores
		if quota > 0 {
			f.periods += 10
			f.throttled += uint64(math.Round(10 * share))
		}
		f.m.ObserveCPU(f.job, CPUSample{Time: f.at, UsageSeconds: f.usage, Periods: f.periods, ThrottledPeriods: f.throttled, QuotaCores: quota})
	}
}

// mem takes a memory sample at the feed's time with an interval peak.
func (f *feed) mem(cur, peak uint64) {
	f.m.ObserveMemory(f.job, MemorySample{Time: f.at, CurrentBytes: cur, PeakBytes: peak, Peak: PeakSinceLastSample, OOMKills: f.oom})
}

func (f *feed) rec(cur limits.Limits, host Host) Recommendation {
	f.t.Helper()
	r, ok := f.m.Recommend(f.job, f.at, cur, host)
	if !ok {
		f.t.Fatal("no history")
	}
	return r
}

func hasNote(r Recommendation, s string) bool {
	for _, n := range r.Notes {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// Whatever the peak, memory is at or above it by at most 12.75 % (within
// the 15 % target), a readable size, and memory_high lies between the
// peak and memory.
func TestMemoryRule(t *testing.T) {
	p := DefaultParams()
	for peak := uint64(1 << 20); peak < 64<<30; peak = peak*21/20 + 4093 {
		f := newFeed(t, p)
		f.at = f.at.Add(15 * time.Second)
		f.mem(peak/2, peak)
		r := f.rec(limits.Limits{}, Host{})
		// The peak is kept in KiB, rounded up.
		kept := int64((peak + 1023) / 1024 * 1024)
		if r.Evidence.MemoryPeak != kept {
			t.Fatalf("peak %d: evidence says %d", peak, r.Evidence.MemoryPeak)
		}
		if r.Memory < kept || r.MemorySlack() > 0.1275 {
			t.Fatalf("peak %d: memory %d, slack %.2f %%", peak, r.Memory, 100*r.MemorySlack())
		}
		if r.MemoryHigh < kept || r.MemoryHigh >= r.Memory {
			t.Fatalf("peak %d: memory_high %d not in [peak, memory %d)", peak, r.MemoryHigh, r.Memory)
		}
		if s := formatBytes(r.Memory); !strings.HasSuffix(s, "iB") {
			t.Fatalf("peak %d: memory %d is not a KiB multiple", peak, r.Memory)
		}
		if r.Memory < limits.MinMemory {
			t.Fatalf("memory %d below berth's least", r.Memory)
		}
	}
}

// A tiny job still gets berth's least memory limit.
func TestMemoryLeast(t *testing.T) {
	f := newFeed(t, DefaultParams())
	f.at = f.at.Add(15 * time.Second)
	f.mem(100<<10, 200<<10)
	if r := f.rec(limits.Limits{}, Host{}); r.Memory != limits.MinMemory {
		t.Errorf("memory %d, want %d", r.Memory, limits.MinMemory)
	}
}

// cpu is the load-weighted percentile plus the margin, rounded up to
// 0.01 core; at least the kernel's least quota for the period in force;
// at most the host's CPUs.
func TestCPURule(t *testing.T) {
	f := newFeed(t, DefaultParams())
	f.cpu(time.Hour, 0.3, 0, 0)
	r := f.rec(limits.Limits{}, Host{CPUs: 4})
	end := cpuScheme.end(cpuScheme.bucket(0.3))
	if r.Evidence.CPUTarget != end || r.Evidence.CPUP90 != end || r.Evidence.CPUMax != end {
		t.Errorf("evidence %+v: want every percentile %v", r.Evidence, end)
	}
	if want := math.Ceil(end*1.15*100) / 100; r.CPU != want {
		t.Errorf("cpu %v, want %v", r.CPU, want)
	}
	if r.Evidence.CPUSamples != 3600 || r.Evidence.SampledSeconds != 3600 {
		t.Errorf("samples %d over %v s", r.Evidence.CPUSamples, r.Evidence.SampledSeconds)
	}

	idle := newFeed(t, DefaultParams())
	idle.cpu(time.Hour, 0, 0, 0)
	if r := idle.rec(limits.Limits{}, Host{}); r.CPU != 0.01 {
		t.Errorf("idle: cpu %v, want 0.01", r.CPU)
	}
	if r := idle.rec(limits.Limits{CPU: 1, CPUPeriod: 10 * time.Millisecond}, Host{}); r.CPU != 0.1 {
		t.Errorf("idle with a 10ms period: cpu %v, want 0.1 (1000 µs per period)", r.CPU)
	}

	busy := newFeed(t, DefaultParams())
	busy.cpu(time.Hour, 1.9, 0, 0)
	if r := busy.rec(limits.Limits{}, Host{CPUs: 2}); r.CPU != 2 || !hasNote(r, "more than the 2 CPUs") {
		t.Errorf("busy: cpu %v, notes %q", r.CPU, r.Notes)
	}
}

// A job idle most of the time is sized for its bursts: samples are
// weighted by load, so 1 busy second in 100 is most of the weight.
func TestCPUBursts(t *testing.T) {
	f := newFeed(t, DefaultParams())
	for range 60 {
		f.cpu(99*time.Second, 0, 0, 0)
		f.cpu(time.Second, 0.8, 0, 0)
	}
	r := f.rec(limits.Limits{}, Host{})
	if r.CPU < 0.8*1.15 {
		t.Errorf("cpu %v below the bursts' 0.8 plus the margin", r.CPU)
	}
	if r.VPA.CPU != vpaMinCPU {
		t.Errorf("VPA's cpu %v, want its floor %v (P90 of time is idle)", r.VPA.CPU, vpaMinCPU)
	}
}

// The seconds in which the job was throttled are censored: they count at
// 1.2 times the quota, so the recommendation rises above the quota.
func TestCPUThrottled(t *testing.T) {
	f := newFeed(t, DefaultParams())
	f.cpu(time.Hour, 0.2, 0.2, 0.5)
	r := f.rec(limits.Limits{CPU: 0.2}, Host{})
	if r.CPU < 0.2*1.2*1.15 {
		t.Errorf("cpu %v: the throttled periods did not raise it", r.CPU)
	}
	if r.Evidence.Periods != 36000 || r.Evidence.ThrottledPeriods != 18000 || r.Evidence.ThrottledShare() != 0.5 {
		t.Errorf("periods %d, throttled %d", r.Evidence.Periods, r.Evidence.ThrottledPeriods)
	}
	if !hasNote(r, "throttled in 50.0 %") {
		t.Errorf("notes %q", r.Notes)
	}
	calm := newFeed(t, DefaultParams())
	calm.cpu(time.Hour, 0.2, 0.5, 0)
	if r := calm.rec(limits.Limits{CPU: 0.5}, Host{}); r.CPU > 0.25 || hasNote(r, "throttled") {
		t.Errorf("unthrottled: cpu %v, notes %q", r.CPU, r.Notes)
	}
}

// A counter that goes down (the cgroup was made anew) or a gap longer
// than MaxGap makes no sample; the next difference counts again.
func TestCPUFresh(t *testing.T) {
	f := newFeed(t, DefaultParams())
	f.cpu(10*time.Second, 0.5, 0, 0)
	f.usage = 0 // a new cgroup
	f.cpu(10*time.Second, 0.5, 0, 0)
	f.at = f.at.Add(time.Hour) // the agent was down
	f.cpu(10*time.Second, 0.5, 0, 0)
	f.m.ObserveCPU(f.job, CPUSample{Time: f.at, UsageSeconds: 1e9}) // a repeated time: ignored
	r := f.rec(limits.Limits{}, Host{})
	if r.Evidence.CPUSamples != 28 {
		t.Errorf("%d samples, want 28 (30 less the reset's and the gap's)", r.Evidence.CPUSamples)
	}
	if r.Evidence.CPUMax > 0.6 {
		t.Errorf("max %v: a reset or a gap made a sample", r.Evidence.CPUMax)
	}
}

// An OOM kill raises memory to 1.2 times the memory the job was killed
// at (VPA's bump), and says so.
func TestOOMKill(t *testing.T) {
	f := newFeed(t, DefaultParams())
	lim := uint64(64 << 20)
	for i := range 10 {
		f.at = f.at.Add(15 * time.Second)
		if i == 5 {
			f.oom++
		}
		f.m.ObserveMemory(f.job, MemorySample{Time: f.at, CurrentBytes: 30 << 20, PeakBytes: 60 << 20, Peak: PeakSinceLastSample, LimitBytes: lim, OOMKills: f.oom})
	}
	r := f.rec(limits.Limits{Memory: int64(lim)}, Host{})
	if want := int64(float64(lim) * 1.2); r.Evidence.MemoryPeak != want || !r.Evidence.MemoryPeakOOM || r.Evidence.OOMKills != 1 {
		t.Errorf("peak %d (OOM %v, %d kills), want %d", r.Evidence.MemoryPeak, r.Evidence.MemoryPeakOOM, r.Evidence.OOMKills, want)
	}
	if r.Memory <= int64(lim) || !hasNote(r, "1 OOM kills") {
		t.Errorf("memory %d, notes %q", r.Memory, r.Notes)
	}
	// VPA's bump: the memory killed at plus at least 100 MiB.
	if want := int64(math.Ceil(vpaMemScheme.end(vpaMemScheme.bucket(float64(lim+vpaOOMMinBump))) * 1.15)); r.VPA.MemoryNoFloor != want {
		t.Errorf("VPA memory %d, want %d", r.VPA.MemoryNoFloor, want)
	}
}

// A watermark that is never reset (v2 memory.peak before 6.12) gives the
// interval's peak when it rises, and the current usage otherwise.
func TestPeakSinceCreation(t *testing.T) {
	f := newFeed(t, DefaultParams())
	obs := func(cur, peak uint64) {
		f.at = f.at.Add(15 * time.Second)
		f.m.ObserveMemory(f.job, MemorySample{Time: f.at, CurrentBytes: cur, PeakBytes: peak, Peak: PeakSinceCreation})
	}
	obs(50<<20, 100<<20) // first: the cgroup's peak counts
	for range 20 {
		obs(50<<20, 100<<20)
	}
	r := f.rec(limits.Limits{}, Host{})
	if r.Evidence.MemoryPeak != 100<<20 {
		t.Errorf("peak %d", r.Evidence.MemoryPeak)
	}
	if want := int64(memScheme.end(memScheme.bucket(50 << 20))); r.Evidence.MemoryP90 != want {
		t.Errorf("P90 %d, want %d: intervals below the watermark count at the current usage", r.Evidence.MemoryP90, want)
	}
	obs(60<<20, 120<<20)
	if r := f.rec(limits.Limits{}, Host{}); r.Evidence.MemoryPeak != 120<<20 {
		t.Errorf("risen: peak %d", r.Evidence.MemoryPeak)
	}
	// A new cgroup: its watermark is below the old one, and counts.
	obs(10<<20, 20<<20)
	obs(10<<20, 30<<20)
	if r := f.rec(limits.Limits{}, Host{}); r.Evidence.MemorySamples != 24 {
		t.Errorf("%d memory samples", r.Evidence.MemorySamples)
	}
}

// Page cache inactive at both ends of an interval is not counted, unless
// the peak came near a limit.
func TestWorkingSet(t *testing.T) {
	for _, c := range []struct {
		name     string
		limit    uint64
		inactive [2]uint64
		want     int64
	}{
		{"cache inactive throughout", 0, [2]uint64{150 << 20, 150 << 20}, 50 << 20},
		{"cache read after the first sample", 0, [2]uint64{0, 150 << 20}, 200 << 20},
		{"near the limit", 205 << 20, [2]uint64{150 << 20, 150 << 20}, 200 << 20},
	} {
		f := newFeed(t, DefaultParams())
		for _, in := range c.inactive {
			f.at = f.at.Add(15 * time.Second)
			f.m.ObserveMemory(f.job, MemorySample{Time: f.at, CurrentBytes: 200 << 20, PeakBytes: 200 << 20, Peak: PeakSinceLastSample,
				InactiveFileBytes: in, HasInactiveFile: true, LimitBytes: c.limit})
		}
		if r := f.rec(limits.Limits{}, Host{}); r.Evidence.MemoryPeak != c.want {
			t.Errorf("%s: working set %d MiB, want %d MiB", c.name, r.Evidence.MemoryPeak>>20, c.want>>20)
		}
	}
}

// A peak counts for the 8 intervals of the window, then is forgotten.
func TestWindow(t *testing.T) {
	p := DefaultParams()
	f := newFeed(t, p)
	f.at = t0.Truncate(24 * time.Hour).Add(time.Hour)
	f.mem(200<<20, 200<<20)
	for day := 1; day <= 9; day++ {
		f.at = f.at.Add(24 * time.Hour)
		f.mem(100<<20, 100<<20)
		r := f.rec(limits.Limits{}, Host{})
		want := int64(200 << 20)
		if day >= Intervals {
			want = 100 << 20
		}
		if r.Evidence.MemoryPeak != want {
			t.Errorf("day %d: peak %d MiB, want %d MiB", day, r.Evidence.MemoryPeak>>20, want>>20)
		}
	}
}

// A working set that grows steadily is noted as a possible leak; a
// steady one is not.
func TestLeakNote(t *testing.T) {
	leak := newFeed(t, DefaultParams())
	steady := newFeed(t, DefaultParams())
	for i := range 240 { // an hour of 15 s samples
		leak.at = leak.at.Add(15 * time.Second)
		steady.at = leak.at
		mb := uint64(100+i/4) << 20
		leak.mem(mb, mb)
		steady.mem(100<<20, 100<<20+uint64(i%3)<<20)
	}
	r := leak.rec(limits.Limits{}, Host{})
	if !hasNote(r, "grew 60.0MiB/h") || r.Evidence.MemoryTrendR2 < 0.99 {
		t.Errorf("leak: trend %v/h R² %v, notes %q", r.Evidence.MemoryTrend, r.Evidence.MemoryTrendR2, r.Notes)
	}
	if r := steady.rec(limits.Limits{}, Host{}); hasNote(r, "grew") {
		t.Errorf("steady: notes %q", r.Notes)
	}
}

// Less than a day of samples is low confidence, noted; the figures are
// not raised for it.
func TestConfidence(t *testing.T) {
	f := newFeed(t, DefaultParams())
	f.cpu(2*time.Hour, 0.3, 0, 0)
	r := f.rec(limits.Limits{}, Host{})
	if !r.LowConfidence || !hasNote(r, "low confidence: 2h0m0s") || math.Abs(r.Evidence.Confidence-1.0/12) > 1e-9 {
		t.Errorf("2 h: low %v, confidence %v, notes %q", r.LowConfidence, r.Evidence.Confidence, r.Notes)
	}
	before := r.CPU
	f.cpu(23*time.Hour, 0.3, 0, 0)
	r = f.rec(limits.Limits{}, Host{})
	if r.LowConfidence || hasNote(r, "confidence") || r.Evidence.Confidence != 1 {
		t.Errorf("25 h: low %v, notes %q", r.LowConfidence, r.Notes)
	}
	if r.CPU != before {
		t.Errorf("cpu %v after a day, %v before: confidence changed the figure", r.CPU, before)
	}
}

// VPA's figures: P90 of time plus 15 %, at least 25 millicores; P90 of
// the intervals' peaks in VPA's buckets plus 15 %, at least 250 MiB.
func TestVPA(t *testing.T) {
	f := newFeed(t, DefaultParams())
	f.cpu(time.Hour, 0.3, 0, 0)
	f.mem(60<<20, 64<<20)
	r := f.rec(limits.Limits{}, Host{})
	if want := math.Ceil(cpuScheme.end(cpuScheme.bucket(0.3))*1.15*1000) / 1000; r.VPA.CPU != want || r.VPA.CPUNoFloor != want {
		t.Errorf("VPA cpu %v (%v without its floor), want %v", r.VPA.CPU, r.VPA.CPUNoFloor, want)
	}
	if want := int64(math.Ceil(vpaMemScheme.end(vpaMemScheme.bucket(64<<20)) * 1.15)); r.VPA.MemoryNoFloor != want || r.VPA.Memory != vpaMinMemory {
		t.Errorf("VPA memory %d (%d without its floor), want %d and %d", r.VPA.Memory, r.VPA.MemoryNoFloor, int64(vpaMinMemory), want)
	}
}

// Jobs, Forget and Expire.
func TestModelJobs(t *testing.T) {
	m, err := New(DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveCPU("b", CPUSample{Time: t0})
	m.ObserveMemory("a", MemorySample{Time: t0.Add(9 * 24 * time.Hour)})
	m.ObserveCPU("c", CPUSample{Time: t0.Add(9 * 24 * time.Hour)})
	if got := strings.Join(m.Jobs(), ","); got != "a,b,c" {
		t.Errorf("jobs %s", got)
	}
	if got := m.Expire(t0.Add(9 * 24 * time.Hour)); len(got) != 1 || got[0] != "b" {
		t.Errorf("expired %v, want [b]", got)
	}
	m.Forget("a")
	if got := strings.Join(m.Jobs(), ","); got != "c" {
		t.Errorf("jobs %s", got)
	}
	if _, ok := m.Recommend("a", t0, limits.Limits{}, Host{}); ok {
		t.Error("a forgotten job has a recommendation")
	}
	if _, err := New(Params{}); err == nil {
		t.Error("zero params accepted")
	}
}
