package limits

import (
	"fmt"
	"math"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// DeviceResolver maps an io device path to its whole disk; ResolveDevice is
// the one for this host.
type DeviceResolver func(path string) (Device, error)

// Period is the effective CFS period: CPUPeriod, or DefaultCPUPeriod when
// it is 0.
func (l *Limits) Period() time.Duration {
	if l.CPUPeriod == 0 {
		return DefaultCPUPeriod
	}
	return l.CPUPeriod
}

// QuotaMicros is the CFS quota in µs for CPU cores over Period: cores ×
// period rounded to the nearest µs. It is a pure function of its inputs, so
// the same cores always give the same quota (failure case C6 in
// docs/cases.md, runc#4622).
func (l *Limits) QuotaMicros() int64 {
	return int64(math.Round(l.CPU * float64(l.Period().Microseconds())))
}

// CPUWeightToShares converts a cgroup v2 cpu.weight (1..10000) to cgroup v1
// cpu.shares (2..262144) as the exact inverse of runc's current
// ConvertCPUSharesToCgroupV2Value (opencontainers/cgroups utils.go, v0.0.5;
// the same function is containerd/cgroups/v3 cgroup2.ConvertCPUSharesToCgroupV2Value,
// used when the shares are written to a v2 host): weight =
// ceil(10^((l² + 125·l)/612 − 7/34)) with l = log2(shares). The result is
// 2^l for the l that solves that quadratic for weight, rounded, then moved
// by the fewest steps needed to convert back to weight: weight 1 -> 2,
// 100 -> 1024 (both defaults), 10000 -> 262144, and
// ConvertCPUSharesToCgroupV2Value(CPUWeightToShares(w)) == w for every w in
// 1..10000. A weight outside 1..10000 is clamped.
func CPUWeightToShares(weight uint64) uint64 {
	w := min(max(weight, 1), 10000)
	// Solve l² + 125·l − 612·(log10 w + 7/34) = 0 for l.
	c := 612 * (math.Log10(float64(w)) + 7.0/34.0)
	l := (-125 + math.Sqrt(125*125+4*c)) / 2
	s := uint64(math.Round(math.Exp2(l)))
	s = min(max(s, 2), 262144)
	// Correct floating-point error so that the shares convert back to w.
	for s < 262144 && cgroup2.ConvertCPUSharesToCgroupV2Value(s) < w {
		s++
	}
	for s > 2 && cgroup2.ConvertCPUSharesToCgroupV2Value(s) > w {
		s--
	}
	return s
}

// IOWeightToBlkioWeight converts a cgroup v2 io.weight (1..10000) to a
// cgroup v1 blkio.weight (10..1000,
// Documentation/admin-guide/cgroup-v1/blkio-controller.rst) as the inverse
// of runc's ConvertBlkIOToIOWeightValue, io = 1 + (blkio−10)·9999/990 (also
// in containerd/cgroups/v3 cgroup2.ToResources): the smallest blkio weight
// that converts back to at least weight. A weight outside 1..10000 is
// clamped.
func IOWeightToBlkioWeight(weight uint64) uint16 {
	w := min(max(weight, 1), 10000)
	b := 10 + ((w-1)*990)/9999
	for b < 1000 && 1+(b-10)*9999/990 < w {
		b++
	}
	return uint16(b)
}

// Resources converts l to runtime-spec resources for a job's or a sharing
// group's cgroup, each key as its row of the table of limits writes it
// (keys, in limits.go): a zero field of l leaves its resource unset. The
// CPU quota is a pure function of cores and period (failure case C6 in
// docs/cases.md); the weights are converted for v1 (CPU.Shares,
// BlockIO.Weight) and given exactly in Unified too; the io throttles are
// on the whole disk that resolve (ResolveDevice when nil) gives for each
// device.
//
// Unified holds cgroup v2 file names and values: a cgroup layer on v2
// writes them (they agree with what it would derive from Shares/Weight);
// on v1 it ignores Unified, and should warn that what it holds (an exact
// weight, memory.high) is not enforced there.
//
// notes are the resolver's notes (a partition or a file system path mapped
// to its disk), for the caller to log. err is non-nil when a device cannot
// be resolved (it names the device).
func (l *Limits) Resources(resolve DeviceResolver) (*specs.LinuxResources, []string, error) {
	if resolve == nil {
		resolve = ResolveDevice
	}
	w := newWriter(&specs.LinuxResources{}, nil)
	w.resolve = resolve
	for _, k := range keys {
		if k.write != nil {
			k.write(l, w)
		}
	}
	if w.err != nil {
		return nil, nil, w.err
	}
	return w.result(), w.notes, nil
}

// writeIO is io's write: one throttle entry per rate of each io entry, on
// the whole disk its device resolves to.
func writeIO(l *Limits, w *writer) {
	for _, io := range l.IO {
		if w.err != nil {
			return
		}
		dev, err := w.resolve(io.Device)
		if err != nil {
			w.err = fmt.Errorf("io limit on %s: %w", io.Device, err)
			return
		}
		if dev.Note != "" {
			w.notes = append(w.notes, dev.Note)
		}
		b := w.blockIO()
		add := func(list *[]specs.LinuxThrottleDevice, rate int64) {
			if rate > 0 {
				t := specs.LinuxThrottleDevice{Rate: uint64(rate)}
				t.Major, t.Minor = int64(dev.Major), int64(dev.Minor)
				*list = append(*list, t)
			}
		}
		add(&b.ThrottleReadBpsDevice, io.ReadBPS)
		add(&b.ThrottleWriteBpsDevice, io.WriteBPS)
		add(&b.ThrottleReadIOPSDevice, io.ReadIOPS)
		add(&b.ThrottleWriteIOPSDevice, io.WriteIOPS)
	}
}

// writer builds the resources of Resources, Lift and Defaults from a base
// it never modifies (Lift's next): each part of the base (memory, CPU,
// pids, block I/O, the unified map) is copied the first time a key writes
// into it, and the parts no key writes stay shared with the base.
type writer struct {
	r specs.LinuxResources
	// prev is what the cgroup was last given (Lift's prev); nil when it
	// is not known (Defaults: any limit may be there).
	prev *specs.LinuxResources
	// next is the base: what is asked now.
	next *specs.LinuxResources
	// resolve, notes and err are Resources' resolver, its notes and the
	// first error.
	resolve DeviceResolver
	notes   []string
	err     error
	// own says which parts of r are copies already.
	own struct{ memory, cpu, pids, blockIO, unified bool }
}

func newWriter(next, prev *specs.LinuxResources) *writer {
	return &writer{r: *next, next: next, prev: prev}
}

// result is what was written.
func (w *writer) result() *specs.LinuxResources {
	r := w.r
	return &r
}

// own returns a copy of *p to write into, made once (a new value when *p
// is nil).
func own[T any](done *bool, p **T) *T {
	if !*done {
		var v T
		if *p != nil {
			v = **p
		}
		*p, *done = &v, true
	}
	return *p
}

func (w *writer) memory() *specs.LinuxMemory   { return own(&w.own.memory, &w.r.Memory) }
func (w *writer) cpu() *specs.LinuxCPU         { return own(&w.own.cpu, &w.r.CPU) }
func (w *writer) pids() *specs.LinuxPids       { return own(&w.own.pids, &w.r.Pids) }
func (w *writer) blockIO() *specs.LinuxBlockIO { return own(&w.own.blockIO, &w.r.BlockIO) }

// unified sets the cgroup v2 file k to v in Unified.
func (w *writer) unified(k, v string) {
	if !w.own.unified {
		m := make(map[string]string, len(w.r.Unified)+1)
		for k, v := range w.r.Unified {
			m[k] = v
		}
		w.r.Unified, w.own.unified = m, true
	}
	w.r.Unified[k] = v
}
