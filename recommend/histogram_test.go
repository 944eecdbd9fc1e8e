package recommend

import (
	"math"
	"testing"
)

// The schemes have the bucket counts VPA's options give (and fit a byte).
func TestSchemeBuckets(t *testing.T) {
	for _, c := range []struct {
		name string
		s    *scheme
		n    int
	}{{"cpu", &cpuScheme, 223}, {"memory", &memScheme, 224}, {"vpa memory", &vpaMemScheme, 176}} {
		if c.s.n != c.n {
			t.Errorf("%s: %d buckets, want %d", c.name, c.s.n, c.n)
		}
		for i := 0; i < c.s.n; i++ {
			lo := c.s.start(i)
			if got := c.s.bucket(lo); got != i {
				t.Fatalf("%s: bucket(start(%d) = %v) = %d", c.name, i, lo, got)
			}
			if i+1 < c.s.n {
				hi := math.Nextafter(c.s.start(i+1), 0)
				if got := c.s.bucket(hi); got != i {
					t.Fatalf("%s: bucket(just below start(%d)) = %d, want %d", c.name, i+1, got, i)
				}
				// Each bucket is 5 % wider than the one before.
				if i > 0 {
					r := (c.s.end(i) - c.s.start(i)) / (c.s.end(i-1) - c.s.start(i-1))
					if math.Abs(r-1.05) > 1e-9 {
						t.Fatalf("%s: bucket %d is %v times as wide as the one before", c.name, i, r)
					}
				}
			}
		}
		if got := c.s.bucket(math.Inf(1)); got != c.s.n-1 {
			t.Errorf("%s: +Inf in bucket %d, want the last", c.name, got)
		}
		if got := c.s.bucket(-1); got != 0 {
			t.Errorf("%s: -1 in bucket %d, want 0", c.name, got)
		}
	}
}

// A sample one half-life older weighs half as much: with two samples a
// half-life apart, the older holds a third of the weight.
func TestHistogramDecay(t *testing.T) {
	const hl = 3600.0
	var h histogram
	h.add(&cpuScheme, 0.1, 1, 1000, hl)
	h.add(&cpuScheme, 0.5, 1, 1000+hl, hl)
	lowEnd := cpuScheme.end(cpuScheme.bucket(0.1))
	highEnd := cpuScheme.end(cpuScheme.bucket(0.5))
	if got := h.percentile(&cpuScheme, 0.33, nil); got != lowEnd {
		t.Errorf("P33 = %v, want the older sample's bucket end %v", got, lowEnd)
	}
	if got := h.percentile(&cpuScheme, 0.34, nil); got != highEnd {
		t.Errorf("P34 = %v, want the newer sample's bucket end %v", got, highEnd)
	}
	if got := h.percentile(&cpuScheme, 1, nil); got != highEnd {
		t.Errorf("P100 = %v, want %v", got, highEnd)
	}
}

// Rebasing (many half-lives on) keeps the percentiles and the weights
// finite, and drops what decayed to nothing.
func TestHistogramRebase(t *testing.T) {
	const hl = 60.0
	var h histogram
	h.add(&memScheme, 300<<20, 1, 0, hl) // decays to nothing
	for i := range 1000 {
		t := float64(i) * hl / 4 // 250 half-lives
		h.add(&memScheme, float64(100<<20+(i%10)<<20), 1, t, hl)
	}
	for _, w := range h.w {
		if math.IsInf(float64(w), 0) || math.IsNaN(float64(w)) {
			t.Fatalf("weight %v", w)
		}
	}
	if h.ref == 0 {
		t.Error("never rebased")
	}
	if top := h.percentile(&memScheme, 1, nil); top > 120<<20 {
		t.Errorf("P100 %v: the sample of 250 half-lives ago still counts", top)
	}
	if got, want := h.percentile(&memScheme, 0.5, nil), memScheme.end(memScheme.bucket(105<<20)); math.Abs(got-want) > 0.06*want {
		t.Errorf("P50 = %v, want about %v", got, want)
	}
	if len(h.w) > 4 {
		t.Errorf("%d buckets kept for samples within 10 %%", len(h.w))
	}
}

// An empty histogram has no percentile; a zero weight adds nothing.
func TestHistogramEmpty(t *testing.T) {
	var h histogram
	h.add(&cpuScheme, 1, 0, 0, 60)
	h.add(&cpuScheme, math.NaN(), 1, 0, 60)
	if !h.empty() || h.percentile(&cpuScheme, 0.9, nil) != 0 {
		t.Errorf("not empty: %+v", h)
	}
}
