package limits

import "time"

// Limits are the resource limits of a job or a sharing group. A zero field
// is unset: nothing is written for it and the kernel's default (no limit)
// holds.
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
