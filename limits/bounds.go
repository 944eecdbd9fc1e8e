package limits

import "time"

// Bounds of the values a limit may take, each from the kernel document that
// sets it. Validation (package config) checks every limit against them, so
// that a value the kernel would refuse is an error in the file, not a failed
// start.
const (
	// DefaultCPUPeriod is the CFS period when cpu_period is unset
	// (Documentation/scheduler/sched-bwc.rst: "cpu.cfs_period_us ... default 100ms").
	DefaultCPUPeriod = 100 * time.Millisecond
	// MinCPUPeriod and MaxCPUPeriod bound cpu_period
	// (sched-bwc.rst: "The minimum quota allowed for the quota or period is
	// 1ms. There is also an upper bound on the period length of 1s").
	MinCPUPeriod = time.Millisecond
	MaxCPUPeriod = time.Second
	// MinCPUQuotaMicros is the smallest CFS quota, µs (sched-bwc.rst).
	MinCPUQuotaMicros = 1000
	// MinWeight and MaxWeight bound cpu.weight and io.weight
	// (Documentation/admin-guide/cgroup-v2.rst "Weights": [1, 10000]).
	MinWeight, MaxWeight = 1, 10000
	// MinMemory is the smallest memory limit berth accepts, bytes: below it
	// a job cannot even exec.
	MinMemory = 1 << 20
	// MaxPids is the largest pids limit: the kernel's PID_MAX_LIMIT on
	// 64-bit (include/linux/threads.h: 4 * 1024 * 1024); a pids.max above
	// the host's /proc/sys/kernel/pid_max is accepted by the kernel but
	// means "max".
	MaxPids = 4 * 1024 * 1024
)
