package limits

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// DeviceResolver maps an io device path to its whole disk; ResolveDevice is
// the one for this host.
type DeviceResolver func(path string) (Device, error)

// Keys of specs.LinuxResources.Unified that Resources fills (cgroup v2 file
// names, Documentation/admin-guide/cgroup-v2.rst).
const (
	UnifiedCPUWeight  = "cpu.weight"
	UnifiedMemoryHigh = "memory.high"
	UnifiedIOWeight   = "io.weight"
)

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
// group's cgroup. A zero field of l leaves the resource unset.
//
//   - CPU.Quota (µs) = cores × period rounded to the nearest µs
//     (deterministic, failure case C6 in docs/cases.md); CPU.Period (µs) = cpu_period or 100000.
//   - CPU.Shares = CPUWeightToShares(cpu_weight) for v1; the exact weight is
//     also in Unified["cpu.weight"].
//   - CPU.Cpus = cpuset.
//   - Memory.Limit = memory; Memory.Swap = memory + memory_swap, runtime-spec's
//     memory+swap total, so Swap == Limit (swap off) when memory_swap is 0.
//     memory_high goes to Unified["memory.high"] (v2 only).
//   - Pids.Limit = pids.
//   - BlockIO.Weight = IOWeightToBlkioWeight(io_weight) for v1; the exact
//     weight is also in Unified["io.weight"] ("default" weight).
//   - BlockIO.Throttle{Read,Write}{Bps,IOPS}Device per io entry, on the whole
//     disk that resolve (ResolveDevice when nil) gives for its device.
//
// Unified holds cgroup v2 file names and values: a cgroup layer on v2
// writes them (they agree with what it would derive from Shares/Weight);
// on v1 it ignores Unified, and should warn that memory.high is not
// enforced there.
//
// notes are the resolver's notes (a partition or a file system path mapped
// to its disk), for the caller to log. err is non-nil when a device cannot
// be resolved (it names the device).
func (l *Limits) Resources(resolve DeviceResolver) (*specs.LinuxResources, []string, error) {
	if resolve == nil {
		resolve = ResolveDevice
	}
	r := &specs.LinuxResources{}
	unified := map[string]string{}
	if l.CPU > 0 || l.CPUWeight > 0 || l.Cpuset != "" {
		r.CPU = &specs.LinuxCPU{}
	}
	if l.CPU > 0 {
		period := uint64(l.Period().Microseconds())
		quota := l.QuotaMicros()
		r.CPU.Period, r.CPU.Quota = &period, &quota
	}
	if l.CPUWeight > 0 {
		shares := CPUWeightToShares(l.CPUWeight)
		r.CPU.Shares = &shares
		unified[UnifiedCPUWeight] = strconv.FormatUint(l.CPUWeight, 10)
	}
	if l.Cpuset != "" {
		r.CPU.Cpus = l.Cpuset
	}
	if l.Memory > 0 {
		limit, swap := l.Memory, l.Memory+l.MemorySwap
		r.Memory = &specs.LinuxMemory{Limit: &limit, Swap: &swap}
	}
	if l.MemoryHigh > 0 {
		unified[UnifiedMemoryHigh] = strconv.FormatInt(l.MemoryHigh, 10)
	}
	if l.Pids > 0 {
		pids := l.Pids
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	var notes []string
	if l.IOWeight > 0 || len(l.IO) > 0 {
		r.BlockIO = &specs.LinuxBlockIO{}
	}
	if l.IOWeight > 0 {
		w := IOWeightToBlkioWeight(l.IOWeight)
		r.BlockIO.Weight = &w
		unified[UnifiedIOWeight] = "default " + strconv.FormatUint(l.IOWeight, 10)
	}
	for _, io := range l.IO {
		dev, err := resolve(io.Device)
		if err != nil {
			return nil, nil, fmt.Errorf("io limit on %s: %w", io.Device, err)
		}
		if dev.Note != "" {
			notes = append(notes, dev.Note)
		}
		add := func(list *[]specs.LinuxThrottleDevice, rate int64) {
			if rate > 0 {
				t := specs.LinuxThrottleDevice{Rate: uint64(rate)}
				t.Major, t.Minor = int64(dev.Major), int64(dev.Minor)
				*list = append(*list, t)
			}
		}
		add(&r.BlockIO.ThrottleReadBpsDevice, io.ReadBPS)
		add(&r.BlockIO.ThrottleWriteBpsDevice, io.WriteBPS)
		add(&r.BlockIO.ThrottleReadIOPSDevice, io.ReadIOPS)
		add(&r.BlockIO.ThrottleWriteIOPSDevice, io.WriteIOPS)
	}
	if len(unified) > 0 {
		r.Unified = unified
	}
	return r, notes, nil
}
