// Package replay is the evidence for package recommend's rule: synthetic
// jobs (steady, step, slow leak, bursty) as shapes of CPU and memory over
// time, a replay of their samples through the model with the re-run that
// checks the recommendation (no OOM kill, throttled periods), and Follow,
// which makes a real process follow a shape so that the end-to-end test
// can run the same jobs under the real agent (test/shapejob).
package replay

import (
	"fmt"
	"math"
	"time"
)

// Period is the resolution of a shape: its CPU demand is constant over
// each period, the CFS period by default.
const Period = 100 * time.Millisecond

// Shape is a synthetic job: the CPU it demands and the anonymous memory
// it holds, as functions of the time since it started. CPU is at most 1
// core (one thread).
type Shape struct {
	// Name is the shape's name (Names).
	Name string
	// CPU is the demand, cores, during the Period that holds t.
	CPU func(t time.Duration) float64
	// Memory is the memory held at t, bytes.
	Memory func(t time.Duration) int64
}

// Names are the shapes New makes.
func Names() []string { return []string{"steady", "step", "leak", "bursty"} }

const mib = 1 << 20

// New returns the shape name for a run of duration d: seed varies its
// noise and the phase of its bursts (a re-run takes another seed), never
// its levels.
//
//   - steady: 0.2 core ± 10 % per period; 40 MiB, allocated over the
//     first second.
//   - step: 0.1 core and 24 MiB, then from d/2 0.4 core and 64 MiB.
//   - leak: 0.1 core; 16 MiB growing evenly to 64 MiB at d.
//   - bursty: 0.05 core and 24 MiB, and every 30 s a 3 s burst whose CPU
//     and memory go round 0.6, 0.35, 0.5, 0.3 core and +48, +16, +32,
//     +8 MiB: the highest every fourth burst.
//
// Errors: an unknown name.
func New(name string, d time.Duration, seed uint64) (Shape, error) {
	noise := func(t time.Duration, spread float64) float64 {
		return 1 + spread*(2*unit(seed, uint64(t/Period))-1)
	}
	s := Shape{Name: name}
	switch name {
	case "steady":
		s.CPU = func(t time.Duration) float64 { return 0.2 * noise(t, 0.1) }
		s.Memory = func(t time.Duration) int64 { return int64(40 * mib * math.Min(1, t.Seconds())) }
	case "step":
		s.CPU = func(t time.Duration) float64 {
			if t >= d/2 {
				return 0.4 * noise(t, 0.1)
			}
			return 0.1 * noise(t, 0.1)
		}
		s.Memory = func(t time.Duration) int64 {
			if t >= d/2 {
				return 64 * mib
			}
			return 24 * mib
		}
	case "leak":
		s.CPU = func(t time.Duration) float64 { return 0.1 * noise(t, 0.1) }
		s.Memory = func(t time.Duration) int64 {
			return 16*mib + int64(48*mib*math.Min(1, t.Seconds()/d.Seconds()))/4096*4096
		}
	case "bursty":
		const every, length = 30 * time.Second, 3 * time.Second
		// The phase is a whole number of periods, so a burst starts and
		// ends with one.
		phase := time.Duration(unit(seed, math.MaxUint64)*float64(every/Period)) * Period
		burst := func(t time.Duration) (int, bool) {
			if t < phase {
				return 0, false
			}
			n := int((t - phase) / every)
			return n % 4, (t-phase)%every < length
		}
		cpu := []float64{0.6, 0.35, 0.5, 0.3}
		mem := []int64{48 * mib, 16 * mib, 32 * mib, 8 * mib}
		s.CPU = func(t time.Duration) float64 {
			if i, on := burst(t); on {
				return cpu[i] * noise(t, 0.05)
			}
			return 0.05 * noise(t, 0.1)
		}
		s.Memory = func(t time.Duration) int64 {
			if i, on := burst(t); on {
				return 24*mib + mem[i]
			}
			return 24 * mib
		}
	default:
		return Shape{}, fmt.Errorf("no shape %q (shapes: %v)", name, Names())
	}
	return s, nil
}

// unit is a number in [0, 1) that depends only on seed and i
// (SplitMix64's finaliser over both): a shape's noise is a function of
// time, the same in a replay and in a real job that follows it.
func unit(seed, i uint64) float64 {
	z := seed ^ (i * 0x9e3779b97f4a7c15)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// MaxMemory is the most memory s holds in a run of duration d, bytes.
func (s Shape) MaxMemory(d time.Duration) int64 {
	var m int64
	for t := time.Duration(0); t <= d; t += Period {
		m = max(m, s.Memory(t))
	}
	return m
}
