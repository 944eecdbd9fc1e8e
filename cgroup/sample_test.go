package cgroup

import (
	"errors"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// CPUCounters reads what Usage reads of CPU time and throttling, from
// fewer files: the usage grows with a busy loop, the CFS periods are
// counted under a quota and the loop is throttled at half a core.
func TestCPUCounters(t *testing.T) {
	h := testHierarchy(t)
	g, err := h.New("jobs/counters", &specs.LinuxResources{
		CPU: &specs.LinuxCPU{Quota: ptr(int64(50000)), Period: ptr(uint64(100000))},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.CPUCounters()
	if err != nil || c.QuotaCores != 0.5 || c.UsageSeconds != 0 {
		t.Fatalf("CPUCounters of a new group = %+v, %v; want quota 0.5, no usage", c, err)
	}
	startIn(t, g, "while :; do :; done")
	if !testutil.Poll(20*time.Second, func() bool {
		c, err = g.CPUCounters()
		return err == nil && c.UsageSeconds > 0.3 && c.ThrottledPeriods > 2
	}) {
		t.Fatalf("CPUCounters = %+v, %v: a busy loop under 0.5 core is not counted or not throttled", c, err)
	}
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.CPUUsageSeconds < c.UsageSeconds || u.Periods < c.Periods || u.ThrottledPeriods < c.ThrottledPeriods || c.ThrottledPeriods > c.Periods {
		t.Errorf("CPUCounters %+v, then Usage %+v: the counters disagree", c, u)
	}
	// Without a quota the kernel counts no periods, and none are read.
	if err := g.Update(&specs.LinuxResources{CPU: &specs.LinuxCPU{Quota: ptr(int64(-1))}}); err != nil {
		t.Fatal(err)
	}
	if c, err = g.CPUCounters(); err != nil || c.QuotaCores != 0 || c.UsageSeconds < u.CPUUsageSeconds {
		t.Errorf("CPUCounters without a quota = %+v, %v", c, err)
	}
	if err := g.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CPUCounters(); !errors.Is(err, ErrNotExist) {
		t.Errorf("CPUCounters of a deleted group: %v, want ErrNotExist", err)
	}
}

// MemorySample's watermark catches a peak between two samples: 40 MiB
// held for a moment by tail(1) reading /dev/zero, gone by the next
// sample. On v1 the watermark is reset by each sample (the next one is
// below the peak); on v2 memory.peak is the peak since the group was
// made. The inactive page cache and the limit come with it.
func TestMemorySampleWatermark(t *testing.T) {
	h := testHierarchy(t)
	g, err := h.New("jobs/watermark", &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: ptr(int64(256 << 20))}})
	if err != nil {
		t.Fatal(err)
	}
	const peak = 40 << 20
	startIn(t, g, "head -c 41943040 /dev/zero | tail >/dev/null; exec sleep 1000")
	var s MemorySample
	seen := false
	if !testutil.Poll(30*time.Second, func() bool {
		s, err = g.MemorySample()
		seen = seen || s.PeakBytes >= peak
		return err == nil && seen && s.CurrentBytes < peak/2
	}) {
		t.Fatalf("MemorySample = %+v, %v: the 40 MiB peak was not seen (%v) or not released", s, err, seen)
	}
	if s.LimitBytes != 256<<20 || !s.HasInactiveFile {
		t.Errorf("MemorySample = %+v: want limit 256 MiB and the inactive page cache", s)
	}
	s, err = g.MemorySample()
	if err != nil {
		t.Fatal(err)
	}
	switch h.Mode() {
	case Unified:
		if s.Peak == WatermarkSinceCreation && s.PeakBytes < peak {
			t.Errorf("memory.peak %d after a peak of %d", s.PeakBytes, peak)
		}
	default:
		if s.Peak != WatermarkSinceLastSample || s.PeakBytes >= peak || s.PeakBytes < s.CurrentBytes/2 {
			t.Errorf("v1 watermark after its reset: %+v; want below the 40 MiB peak, about the current charge", s)
		}
	}
}
