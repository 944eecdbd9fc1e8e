package recommend

import "math"

// scheme is an exponential bucketing scheme, as the Vertical Pod
// Autoscaler's recommender buckets its histograms: bucket i covers
// [start(i), start(i+1)) with start(i) = first × (ratio^i − 1) / (ratio − 1),
// so that each bucket is ratio times as wide as the one before it and the
// relative width tends to ratio − 1; the last bucket is open above. Every
// scheme here has at most 256 buckets, so a bucket index fits in a byte.
type scheme struct {
	first, ratio, logRatio float64
	n                      int
	// starts are the buckets' lower bounds, computed once.
	starts []float64
}

// The schemes in use. A change to one of them changes what a stored
// bucket index means: it needs a new file version (persist.go).
var (
	// cpuScheme buckets CPU usage in cores: VPA's CPU histogram (first
	// bucket 0.001 core, 5 % growth, up to 1000 cores), 223 buckets.
	cpuScheme = newScheme(1000, 0.001, 1.05)
	// memScheme buckets memory in bytes: first bucket 1 MiB, 5 % growth,
	// up to 1 TiB, 224 buckets. VPA's first bucket is 10 MB, which is 20 %
	// wide at 64 MiB; berth's jobs are often that small.
	memScheme = newScheme(1<<40, 1<<20, 1.05)
	// vpaMemScheme is VPA's memory histogram (first bucket 10 MB, 5 %
	// growth, up to 1 TB), used only to compute VPA's figures.
	vpaMemScheme = newScheme(1e12, 1e7, 1.05)
)

func newScheme(max, first, ratio float64) scheme {
	s := scheme{first: first, ratio: ratio, logRatio: math.Log(ratio)}
	s.n = int(math.Ceil(math.Log(max*(ratio-1)/first+1)/s.logRatio)) + 1
	if s.n > 256 {
		panic("recommend: a bucketing scheme has more than 256 buckets")
	}
	s.starts = make([]float64, s.n)
	for i := range s.starts {
		s.starts[i] = first * (math.Pow(ratio, float64(i)) - 1) / (ratio - 1)
	}
	return s
}

// start is the lower bound of bucket i.
func (s *scheme) start(i int) float64 { return s.starts[i] }

// end is the upper bound of bucket i (the start of the next); for the
// last, open bucket its start.
func (s *scheme) end(i int) float64 {
	if i >= s.n-1 {
		return s.start(s.n - 1)
	}
	return s.start(i + 1)
}

// bucket is the index of the bucket holding v (0 for v < 0 or NaN).
func (s *scheme) bucket(v float64) int {
	if !(v > 0) {
		return 0
	}
	if v >= s.start(s.n-1) {
		return s.n - 1
	}
	i := int(math.Floor(math.Log(v*(s.ratio-1)/s.first+1) / s.logRatio))
	// The logarithm may land one off at a bucket's bounds.
	if i > 0 && v < s.start(i) {
		i--
	} else if i+1 < s.n && v >= s.start(i+1) {
		i++
	}
	return max(0, min(i, s.n-1))
}

// maxExponent bounds the exponent of a histogram's growth factor: when a
// sample would be weighted by more than 2^maxExponent, every weight is
// scaled down first (rebase), so that float32 weights never overflow
// (2^32 times a weight sum of at most ~10^7 is far below float32's 3e38).
const maxExponent = 32

// histogram is a decaying histogram over a scheme, as VPA's: rather than
// decaying every weight as time passes, each new sample's weight is
// multiplied by 2^((t − ref)/halfLife), so that a sample one half-life
// older than another weighs half as much; ref moves forward (and every
// weight is scaled down with it) when the factor grows large. Only the
// buckets from the lowest to the highest non-empty one are kept, so a
// job whose usage varies within a factor of two holds about 15 of them.
//
// Weights are float32: a bucket's sum is at most about
// halfLife/ln 2/interval ≈ 125,000 times one sample's weight (1 s
// samples, 24 h half-life), so an addition rounds to within 2^-7 of the
// added weight, and the rounding is as often up as down: well within
// what a percentile over 5 %-wide buckets can tell.
type histogram struct {
	// ref is the reference time of the weights, Unix seconds.
	ref int64
	// lo is the index of the bucket w[0] counts.
	lo uint8
	// w are the weights of buckets lo … lo+len(w)−1.
	w []float32
}

// add adds a sample of value v with weight weight at Unix time t
// (seconds) to h, decaying with the half-life hl (seconds).
func (h *histogram) add(s *scheme, v, weight, t, hl float64) {
	if !(weight > 0) || math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if len(h.w) == 0 {
		h.ref = int64(math.Floor(t))
	}
	if (t-float64(h.ref))/hl > maxExponent {
		h.rebase(t, hl)
	}
	i := s.bucket(v)
	h.grow(i)
	h.w[i-int(h.lo)] += float32(weight * math.Exp2((t-float64(h.ref))/hl))
}

// rebase moves ref to within one half-life of t, scaling every weight
// down by the same factor (percentiles do not change), and drops the
// buckets at either end that are left empty.
func (h *histogram) rebase(t, hl float64) {
	k := math.Floor((t - float64(h.ref)) / hl)
	f := math.Exp2(-k)
	for i := range h.w {
		h.w[i] = float32(float64(h.w[i]) * f)
	}
	h.ref += int64(k * hl)
	h.compact()
}

// grow extends w to cover bucket i, allocating exactly what it needs.
func (h *histogram) grow(i int) {
	switch lo := int(h.lo); {
	case len(h.w) == 0:
		h.lo, h.w = uint8(i), make([]float32, 1)
	case i < lo:
		w := make([]float32, lo-i+len(h.w))
		copy(w[lo-i:], h.w)
		h.lo, h.w = uint8(i), w
	case i >= lo+len(h.w):
		w := make([]float32, i-lo+1)
		copy(w, h.w)
		h.w = w
	}
}

// trim drops the buckets at either end whose weight is at most min,
// keeping the slice's own memory when little is dropped.
func (h *histogram) trim(min float64) {
	a, b := 0, len(h.w)
	for a < b && float64(h.w[a]) <= min {
		a++
	}
	for b > a && float64(h.w[b-1]) <= min {
		b--
	}
	if a == 0 && b == len(h.w) {
		return
	}
	if a == b {
		h.lo, h.w = 0, nil
		return
	}
	w := make([]float32, b-a)
	copy(w, h.w[a:b])
	h.lo, h.w = h.lo+uint8(a), w
}

// negligible is the share of a histogram's weight below which a bucket
// at either end is dropped (by compact): it could not move a percentile
// up to the 99.99th, and the bytes of a job whose usage moved for good
// do not grow with every range it once had.
const negligible = 1e-6

// compact drops the buckets at either end that hold less than negligible
// of the total weight.
func (h *histogram) compact() {
	total := 0.0
	for _, w := range h.w {
		total += float64(w)
	}
	h.trim(negligible * total)
}

// empty reports whether h holds no weight.
func (h *histogram) empty() bool { return len(h.w) == 0 }

// percentile returns the upper bound of the bucket in which the weights,
// summed from the lowest bucket, reach the fraction p of their total (VPA
// returns the same bound, so a percentile is never below the samples it
// stands for); 0 for an empty histogram. tf, when not nil, turns a
// bucket's weight into the weight to count (vpaCPU uses it to count time
// rather than load).
func (h *histogram) percentile(s *scheme, p float64, tf func(i int, w float64) float64) float64 {
	if len(h.w) == 0 {
		return 0
	}
	weight := func(j int) float64 {
		w := float64(h.w[j])
		if tf != nil {
			w = tf(int(h.lo)+j, w)
		}
		return w
	}
	total := 0.0
	for j := range h.w {
		total += weight(j)
	}
	if !(total > 0) {
		return 0
	}
	threshold, sum := p*total, 0.0
	for j := range h.w {
		sum += weight(j)
		if sum >= threshold && h.w[j] > 0 {
			return s.end(int(h.lo) + j)
		}
	}
	return s.end(int(h.lo) + len(h.w) - 1)
}
