package limits

import (
	"fmt"
	"math"
	"strconv"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Limits are the resource limits of a job or a sharing group. A zero field
// is unset: nothing is written for it and the kernel's default (no limit)
// holds. Each field is one key of the table below (keys), which says
// everything else about it.
type Limits struct {
	// CPU is the CPU bandwidth limit in cores (quota/period).
	CPU float64 `json:"cpu,omitempty"`
	// CPUPeriod is the CFS period; 0 means DefaultCPUPeriod (100 ms).
	// (JSON: nanoseconds.)
	CPUPeriod time.Duration `json:"cpu_period_ns,omitempty"`
	// CPUWeight is the cgroup v2 cpu.weight, MinWeight..MaxWeight.
	CPUWeight uint64 `json:"cpu_weight,omitempty"`
	// Cpuset is the list of allowed CPUs in cpuset list syntax, "0-3,6".
	Cpuset string `json:"cpuset,omitempty"`
	// Memory is the hard memory limit in bytes (v2 memory.max, v1
	// memory.limit_in_bytes).
	Memory int64 `json:"memory,omitempty"`
	// MemoryHigh is the v2 memory.high throttle limit in bytes.
	MemoryHigh int64 `json:"memory_high,omitempty"`
	// MemoryLow is the v2 memory.low best-effort protection in bytes.
	MemoryLow int64 `json:"memory_low,omitempty"`
	// MemorySwap is the swap allowed in addition to Memory, in bytes.
	MemorySwap int64 `json:"memory_swap,omitempty"`
	// Pids is the maximum number of processes and threads (pids.max).
	Pids int64 `json:"pids,omitempty"`
	// IOWeight is the cgroup v2 io.weight, MinWeight..MaxWeight.
	IOWeight uint64 `json:"io_weight,omitempty"`
	// IO are per-device throttle limits.
	IO []IOLimit `json:"io,omitempty"`
}

// IOLimit throttles one block device. Zero rates are unset.
type IOLimit struct {
	// Device is a block device node or a path on a file system whose
	// backing disk is meant (see ResolveDevice).
	Device string `json:"device,omitempty"`
	// ReadBPS and WriteBPS are bytes per second.
	ReadBPS  int64 `json:"read_bps,omitempty"`
	WriteBPS int64 `json:"write_bps,omitempty"`
	// ReadIOPS and WriteIOPS are I/O operations per second.
	ReadIOPS  int64 `json:"read_iops,omitempty"`
	WriteIOPS int64 `json:"write_iops,omitempty"`
}

// String is "device=/ read_bps=1 write_bps=0 read_iops=0 write_iops=2",
// every rate shown, as a change of a configuration names one io entry.
func (io IOLimit) String() string {
	return fmt.Sprintf("device=%s read_bps=%d write_bps=%d read_iops=%d write_iops=%d",
		io.Device, io.ReadBPS, io.WriteBPS, io.ReadIOPS, io.WriteIOPS)
}

// Keys of specs.LinuxResources.Unified that Resources fills (cgroup v2 file
// names, Documentation/admin-guide/cgroup-v2.rst).
const (
	UnifiedCPUWeight  = "cpu.weight"
	UnifiedMemoryHigh = "memory.high"
	UnifiedIOWeight   = "io.weight"
)

// keys is the table of limits, one row per key of a limits table, in the
// order docs/config.md lists them and the decoder reads them: its meaning,
// bounds and example (the reference, docs/config.md), how a file's value is
// checked and kept (Decode), how it is shown (Value, Format: a change of a
// configuration, the API's view, berth validate's plan), how it is written
// into a cgroup (Resources) and how it is taken out again when a
// definition drops it (Lift, Defaults). A new limit is a field of Limits
// and a row here; the cgroup package writes its resource on each cgroup
// version.
var keys = []Key{
	{
		Name: "cpu", Kind: KindNumber, DefaultNote: "unlimited", Unit: "cores",
		Bounds: "> 0; at most the CPUs online; quota >= 1000 µs per period", Example: "1.5",
		Doc:   "CPU bandwidth: quota = cpu times period (v2 cpu.max; v1 cpu.cfs_quota_us)",
		value: func(l *Limits) any { return set(l.CPU > 0, l.CPU) },
		decode: func(l *Limits, in Input) []Problem {
			if !in.OK {
				return nil
			}
			cpu := in.Value.(float64)
			switch n := in.numCPU(); {
			case cpu <= 0:
				return problem("must be > 0 cores, not %v", cpu)
			case n > 0 && cpu > float64(n):
				return problem("%v cores is more than the %d CPUs of this host", cpu, n)
			}
			l.CPU = cpu
			return nil
		},
		// CPU.Quota (µs) = cores × period rounded to the nearest µs
		// (deterministic, failure case C6 in docs/cases.md); CPU.Period
		// (µs) = cpu_period or 100000.
		write: func(l *Limits, w *writer) {
			if l.CPU > 0 {
				period, quota := uint64(l.Period().Microseconds()), l.QuotaMicros()
				w.cpu().Period, w.cpu().Quota = &period, &quota
			}
		},
		// cpu.max "max" (v1 cpu.cfs_quota_us -1) over the period in force.
		lift: func(w *writer) {
			if w.removed(func(r *specs.LinuxResources) bool { return r.CPU != nil && r.CPU.Quota != nil }) {
				c := w.cpu()
				c.Quota = ptr(int64(Unlimited))
				if c.Period == nil && w.prev != nil {
					c.Period = w.prev.CPU.Period
				}
			}
		},
		blind: true,
	},
	{
		Name: "cpu_period", Kind: KindDuration, DefaultNote: DefaultCPUPeriod.String(),
		Bounds: "1ms to 1s, whole µs (Documentation/scheduler/sched-bwc.rst); needs cpu", Example: `"100ms"`,
		Doc:   "CFS enforcement period of cpu",
		value: func(l *Limits) any { return set(l.CPUPeriod > 0, l.CPUPeriod) },
		// Read after cpu: the quota the two give is checked here, and is
		// cpu's problem.
		decode: func(l *Limits, in Input) []Problem {
			var ps []Problem
			if p, _ := in.Value.(time.Duration); in.OK && p != 0 {
				switch {
				case p < MinCPUPeriod || p > MaxCPUPeriod:
					ps = problem("must be between 1ms and 1s (Documentation/scheduler/sched-bwc.rst), not %v", p)
				case p%time.Microsecond != 0:
					ps = problem("must be a whole number of microseconds, not %v", p)
				default:
					l.CPUPeriod = p
				}
			}
			if l.CPU > 0 {
				if q := l.QuotaMicros(); q < MinCPUQuotaMicros {
					ps = append(ps, Problem{Key: "cpu", Msg: fmt.Sprintf("%v cores gives a quota of %d µs per %v period, below the kernel's minimum of 1000 µs (Documentation/scheduler/sched-bwc.rst)", l.CPU, q, l.Period())})
					l.CPU = 0
				}
			} else if !in.given("cpu") && l.CPUPeriod != 0 {
				ps = append(ps, Problem{Msg: "has no effect without cpu"})
			}
			return ps
		},
		// Written with cpu's quota, and kept when cpu is lifted.
	},
	{
		Name: "cpu_weight", Kind: KindInteger, DefaultNote: "the kernel's, 100", Example: "100",
		Range: &Range{Min: MinWeight, Max: MaxWeight, Source: "cgroup v2 weight"},
		Doc:   "share of CPU under contention (v2 cpu.weight; v1 cpu.shares converted as runc does)",
		value: func(l *Limits) any { return set(l.CPUWeight > 0, l.CPUWeight) },
		decode: func(l *Limits, in Input) []Problem {
			if in.OK {
				l.CPUWeight = uint64(in.Value.(int64))
			}
			return nil
		},
		// CPU.Shares = CPUWeightToShares(cpu_weight) for v1; the exact
		// weight is also in Unified["cpu.weight"].
		write: func(l *Limits, w *writer) {
			if l.CPUWeight > 0 {
				shares := CPUWeightToShares(l.CPUWeight)
				w.cpu().Shares = &shares
				w.unified(UnifiedCPUWeight, strconv.FormatUint(l.CPUWeight, 10))
			}
		},
		// cpu.weight 100 (v1 cpu.shares 1024).
		lift: func(w *writer) {
			if w.removed(func(r *specs.LinuxResources) bool { return r.CPU != nil && r.CPU.Shares != nil }) {
				w.cpu().Shares = ptr(uint64(DefaultShares))
			}
			w.liftUnified(UnifiedCPUWeight, strconv.Itoa(DefaultWeight))
		},
		blind: true,
	},
	{
		Name: "cpuset", Kind: KindString, DefaultNote: "every CPU",
		Bounds: `CPU list syntax "0-3,6"; CPUs online on this host`, Example: `"0-1"`,
		Doc:   "CPUs the job may run on (cpuset.cpus)",
		value: func(l *Limits) any { return set(l.Cpuset != "", l.Cpuset) },
		decode: func(l *Limits, in Input) []Problem {
			if !in.OK {
				return nil
			}
			s := in.Value.(string)
			if _, err := in.checkCpuset(s); err != nil {
				return problem("%v", err)
			}
			l.Cpuset = s
			return nil
		},
		write: func(l *Limits, w *writer) {
			if l.Cpuset != "" {
				w.cpu().Cpus = l.Cpuset
			}
		},
		// Not lifted in place: a v1 cpuset has no value meaning "the
		// parent's" (CpusetRemoved).
	},
	{
		Name: "memory", Kind: KindBytes, DefaultNote: "unlimited", Unit: "bytes", Bounds: ">= 1MiB", Example: `"512MiB"`,
		Doc:   "hard memory limit; above it the kernel OOM-kills inside the cgroup (v2 memory.max; v1 memory.limit_in_bytes)",
		value: func(l *Limits) any { return set(l.Memory > 0, l.Memory) },
		decode: func(l *Limits, in Input) []Problem {
			if !in.OK {
				return nil
			}
			m := in.Value.(int64)
			if m < MinMemory {
				return problem("%d bytes is below the minimum of 1MiB", m)
			}
			l.Memory = m
			return nil
		},
		// Memory.Limit = memory; Memory.Swap = memory + memory_swap,
		// runtime-spec's memory+swap total, so Swap == Limit (swap off)
		// when memory_swap is 0.
		write: func(l *Limits, w *writer) {
			if l.Memory > 0 {
				limit, swap := l.Memory, l.Memory+l.MemorySwap
				w.memory().Limit, w.memory().Swap = &limit, &swap
			}
		},
		// memory.max "max" (v1 memory.limit_in_bytes -1).
		lift: func(w *writer) {
			if w.removed(func(r *specs.LinuxResources) bool { return r.Memory != nil && r.Memory.Limit != nil }) {
				w.memory().Limit = ptr(int64(Unlimited))
			}
		},
		blind: true,
	},
	{
		Name: "memory_high", Kind: KindBytes, DefaultNote: "none", Unit: "bytes", Bounds: "> 0; <= memory", Example: `"448MiB"`,
		Doc:   "throttle and reclaim above this, no OOM kill (v2 memory.high; ignored on v1)",
		value: func(l *Limits) any { return set(l.MemoryHigh > 0, l.MemoryHigh) },
		decode: func(l *Limits, in Input) []Problem {
			return atMost(in, &l.MemoryHigh, bound{"memory", l.Memory})
		},
		// A v2 file: Unified["memory.high"], ignored on v1.
		write: func(l *Limits, w *writer) {
			if l.MemoryHigh > 0 {
				w.unified(UnifiedMemoryHigh, strconv.FormatInt(l.MemoryHigh, 10))
			}
		},
		// memory.high "max".
		lift:  func(w *writer) { w.liftUnified(UnifiedMemoryHigh, "max") },
		blind: true,
	},
	{
		Name: "memory_low", Kind: KindBytes, DefaultNote: "none", Unit: "bytes", Bounds: "> 0; <= memory and memory_high", Example: `"256MiB"`,
		Doc: "best-effort protection from reclaim: below this, the job's memory is reclaimed only when no unprotected memory is left; " +
			"bounded by its parents' protection, so it holds against the other jobs of a sharing group that reaches its memory limit (v2 memory.low; ignored on v1)",
		value: func(l *Limits) any { return set(l.MemoryLow > 0, l.MemoryLow) },
		decode: func(l *Limits, in Input) []Problem {
			return atMost(in, &l.MemoryLow, bound{"memory", l.Memory}, bound{"memory_high", l.MemoryHigh})
		},
		// Memory.Reservation, which containerd's cgroup2 writes to
		// memory.low as runc does; the cgroup package drops it on v1
		// (memory.soft_limit_in_bytes means the opposite).
		write: func(l *Limits, w *writer) {
			if l.MemoryLow > 0 {
				w.memory().Reservation = ptr(l.MemoryLow)
			}
		},
		// memory.low 0.
		lift: func(w *writer) {
			if w.removed(func(r *specs.LinuxResources) bool { return r.Memory != nil && r.Memory.Reservation != nil }) {
				w.memory().Reservation = ptr(int64(0))
			}
		},
		blind: true,
	},
	{
		Name: "memory_swap", Kind: KindBytes, Default: `"0"`, Unit: "bytes", Bounds: "needs memory", Example: `"0"`,
		Doc:   "swap allowed beyond memory; 0: swap off (v2 memory.swap.max; v1 memory.memsw.limit_in_bytes = memory + this)",
		value: func(l *Limits) any { return set(l.MemorySwap > 0, l.MemorySwap) },
		decode: func(l *Limits, in Input) []Problem {
			if !in.OK {
				return nil
			}
			switch m := in.Value.(int64); {
			case m > 0 && l.Memory == 0:
				if !in.given("memory") {
					return problem("needs memory: swap is allowed in addition to the memory limit")
				}
			case l.Memory > math.MaxInt64-m:
				return problem("memory + memory_swap overflows")
			default:
				l.MemorySwap = m
			}
			return nil
		},
		// Written with memory, as runtime-spec's memory+swap total.
		// memory.swap.max "max" (v1 memory.memsw.limit_in_bytes -1).
		lift: func(w *writer) {
			if w.removed(func(r *specs.LinuxResources) bool { return r.Memory != nil && r.Memory.Swap != nil }) {
				w.memory().Swap = ptr(int64(Unlimited))
			}
		},
		blind: true,
	},
	{
		Name: "pids", Kind: KindInteger, DefaultNote: "unlimited", Example: "128",
		Range: &Range{Min: 1, Max: MaxPids, Source: "the kernel's PID_MAX_LIMIT"},
		Doc:   "processes and threads (pids.max)",
		value: func(l *Limits) any { return set(l.Pids > 0, l.Pids) },
		decode: func(l *Limits, in Input) []Problem {
			if in.OK {
				l.Pids = in.Value.(int64)
			}
			return nil
		},
		write: func(l *Limits, w *writer) {
			if l.Pids > 0 {
				w.pids().Limit = ptr(l.Pids)
			}
		},
		// pids.max "max".
		lift: func(w *writer) {
			if w.removed(func(r *specs.LinuxResources) bool { return r.Pids != nil && r.Pids.Limit != nil }) {
				w.pids().Limit = ptr(int64(Unlimited))
			}
		},
		blind: true,
	},
	{
		Name: "io_weight", Kind: KindInteger, DefaultNote: "the kernel's, 100", Example: "100",
		Range: &Range{Min: MinWeight, Max: MaxWeight, Source: "cgroup v2 weight"},
		Doc:   "share of I/O under contention (v2 io.weight; v1 blkio.weight converted)",
		value: func(l *Limits) any { return set(l.IOWeight > 0, l.IOWeight) },
		decode: func(l *Limits, in Input) []Problem {
			if in.OK {
				l.IOWeight = uint64(in.Value.(int64))
			}
			return nil
		},
		// BlockIO.Weight = IOWeightToBlkioWeight(io_weight) for v1; the
		// exact weight is also in Unified["io.weight"] ("default" weight).
		write: func(l *Limits, w *writer) {
			if l.IOWeight > 0 {
				b := IOWeightToBlkioWeight(l.IOWeight)
				w.blockIO().Weight = &b
				w.unified(UnifiedIOWeight, "default "+strconv.FormatUint(l.IOWeight, 10))
			}
		},
		// io.weight "default 100" and the v1 blkio.weight an io_weight of
		// 100 gives. Not blind: the file exists only with the io scheduler
		// that uses it (io.bfq.weight, v1 blkio.weight, v2 io.weight with
		// iocost), and writing it where it is missing fails the whole write.
		lift: func(w *writer) {
			if w.removed(func(r *specs.LinuxResources) bool { return r.BlockIO != nil && r.BlockIO.Weight != nil }) {
				w.blockIO().Weight = ptr(IOWeightToBlkioWeight(DefaultWeight))
			}
			w.liftUnified(UnifiedIOWeight, "default "+strconv.Itoa(DefaultWeight))
		},
	},
	{
		Name: "io", Kind: KindDevices,
		Doc:   "per-device bandwidth and IOPS limits",
		value: func(l *Limits) any { return set(len(l.IO) > 0, l.IO) },
		decode: func(l *Limits, in Input) []Problem {
			if in.OK {
				l.IO = in.Value.([]IOLimit)
			}
			return nil
		},
		write: writeIO,
		// Not blind: the devices of the throttles to lift are not known.
		lift: liftIO,
	},
}

// bound is another key of the table and its value, decoded before.
type bound struct {
	name string
	v    int64
}

// atMost decodes into *field a byte size that must be > 0 and at most
// each of bounds that is set (> 0), checked in order.
func atMost(in Input, field *int64, bounds ...bound) []Problem {
	if !in.OK {
		return nil
	}
	m := in.Value.(int64)
	if m == 0 {
		return problem("must be > 0 bytes")
	}
	for _, b := range bounds {
		if b.v > 0 && m > b.v {
			return problem("%d bytes is above %s (%d bytes)", m, b.name, b.v)
		}
	}
	*field = m
	return nil
}

// set is v when ok, else nil: a key's value, or none when it is unset.
func set(ok bool, v any) any {
	if ok {
		return v
	}
	return nil
}

// ptr is a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }
