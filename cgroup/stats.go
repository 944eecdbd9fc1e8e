package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
)

// v1Unlimited is the smallest value treated as "no limit" in a v1 limit file
// (the kernel shows PAGE_COUNTER_MAX pages, 9223372036854771712 bytes on
// 4 KiB pages).
const v1Unlimited = 1 << 62

// Stats is a group's usage as the kernel accounts it, for the group and all
// its descendants. Counters (CPU*, Throttled*, OOMKills, IO*) never go down
// while the group exists.
type Stats struct {
	// CPUUsageSeconds is the CPU time consumed, in seconds
	// (v1 cpuacct.usage; v2 cpu.stat usage_usec).
	CPUUsageSeconds float64
	// CPUUserSeconds is CPU time in user mode, in seconds (v1 cpuacct.stat
	// user, USER_HZ ticks, so 10 ms resolution; v2 cpu.stat user_usec).
	CPUUserSeconds float64
	// CPUSystemSeconds is CPU time in kernel mode, in seconds (v1
	// cpuacct.stat system; v2 cpu.stat system_usec).
	CPUSystemSeconds float64
	// CPUQuotaCores is the CPU limit in cores, quota/period (v1
	// cpu.cfs_quota_us / cpu.cfs_period_us; v2 cpu.max), 0 when unlimited.
	CPUQuotaCores float64
	// Periods is the number of CFS enforcement periods in which the group
	// was runnable (cpu.stat nr_periods).
	Periods uint64
	// ThrottledPeriods is the number of periods in which the group was
	// throttled by its quota (cpu.stat nr_throttled).
	ThrottledPeriods uint64
	// ThrottledSeconds is the total time the group was throttled, in seconds
	// (v1 cpu.stat throttled_time, ns; v2 throttled_usec).
	ThrottledSeconds float64
	// MemoryBytes is current memory usage in bytes, page cache included: the
	// figure the hard limit is enforced against (v1 memory.usage_in_bytes;
	// v2 memory.current).
	MemoryBytes uint64
	// MemoryLimitBytes is the hard memory limit in bytes, 0 when unlimited
	// (v1 memory.limit_in_bytes; v2 memory.max).
	MemoryLimitBytes uint64
	// OOMKills is the number of processes the OOM killer killed in the group
	// and its descendants (see Group.OOMKills).
	OOMKills uint64
	// Pids is the number of tasks (threads count) in the group
	// (pids.current).
	Pids uint64
	// PidsLimit is pids.max, 0 when unlimited.
	PidsLimit uint64
	// IOReadBytes and IOWriteBytes are bytes read from and written to block
	// devices, summed over devices (v1 blkio.throttle.io_service_bytes_recursive;
	// v2 io.stat rbytes/wbytes). Writes through the page cache are counted
	// when written back, which on v1 may be charged to another cgroup.
	IOReadBytes  uint64
	IOWriteBytes uint64
}

// Stats reads the group's usage. Controllers that are not in use leave their
// fields zero.
//
// v1 reads the few files it reports (statsV1; missing files are skipped)
// plus Group.OOMKills; v2 uses containerd's cgroup2 Stat.
//
// Errors: the group is gone; a control file cannot be read or parsed.
func (g *Group) Stats() (*Stats, error) {
	if g.h.mode == Unified {
		return g.statsV2()
	}
	if g.v1 == nil {
		return nil, fmt.Errorf("read stats of cgroup %s: %w", g.rel, ErrNotExist)
	}
	return g.statsV1()
}

// quotaCores is quota/period in cores; a negative quota or "max" is 0
// (unlimited).
func quotaCores(quota, period string) (float64, error) {
	quota, period = strings.TrimSpace(quota), strings.TrimSpace(period)
	if quota == "max" {
		return 0, nil
	}
	q, err := strconv.ParseInt(quota, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse CPU quota %q: %w", quota, err)
	}
	p, err := strconv.ParseUint(period, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse CPU period %q: %w", period, err)
	}
	if q < 0 || p == 0 {
		return 0, nil
	}
	return float64(q) / float64(p), nil
}

func (g *Group) statsV2() (*Stats, error) {
	m, err := g.v2.Stat()
	if err != nil {
		return nil, fmt.Errorf("read stats of cgroup %s: %w", g.h.unifiedDir(g.rel), err)
	}
	s := &Stats{}
	if c := m.CPU; c != nil {
		s.CPUUsageSeconds = float64(c.UsageUsec) / 1e6
		s.CPUUserSeconds = float64(c.UserUsec) / 1e6
		s.CPUSystemSeconds = float64(c.SystemUsec) / 1e6
		s.Periods = c.NrPeriods
		s.ThrottledPeriods = c.NrThrottled
		s.ThrottledSeconds = float64(c.ThrottledUsec) / 1e6
	}
	if data, err := os.ReadFile(filepath.Join(g.h.unifiedDir(g.rel), "cpu.max")); err == nil {
		if q, p, ok := strings.Cut(strings.TrimSpace(string(data)), " "); ok {
			if s.CPUQuotaCores, err = quotaCores(q, p); err != nil {
				return nil, fmt.Errorf("read stats of cgroup %s: %w", g.h.unifiedDir(g.rel), err)
			}
		}
	}
	if mem := m.Memory; mem != nil {
		s.MemoryBytes = mem.Usage
		if mem.UsageLimit < v1Unlimited {
			s.MemoryLimitBytes = mem.UsageLimit
		}
	}
	if e := m.MemoryEvents; e != nil {
		s.OOMKills = e.OomKill
	}
	if p := m.Pids; p != nil {
		s.Pids = p.Current
		if p.Limit < v1Unlimited { // "max" reads as MaxUint64
			s.PidsLimit = p.Limit
		}
	}
	if io := m.Io; io != nil {
		for _, e := range io.Usage {
			s.IOReadBytes += e.Rbytes
			s.IOWriteBytes += e.Wbytes
		}
	}
	return s, nil
}

// OOMKills returns the kernel's count of OOM kills in the group and all its
// descendants.
//
// v2: the oom_kill line of memory.events (not memory.events.local: a
// sharing group's node must count its jobs' kills; cgroup-v2.rst
// "memory.events"). v1: the oom_kill line of memory.oom_control (kernel ≥
// 4.13), summed over the group and every descendant, because v1 does not
// propagate memory events to ancestors. The count is that of the current
// cgroups: deleting a child cgroup drops its kills from a v1 parent's sum.
//
// Errors: the memory controller is not in use or the group is not in it
// (wrapping ErrNotExist); a file cannot be read or parsed.
func (g *Group) OOMKills() (uint64, error) {
	if g.h.mode == Unified {
		f := filepath.Join(g.h.unifiedDir(g.rel), "memory.events")
		var v uint64
		if err := readKeys(f, map[string]*uint64{"oom_kill": &v}); err != nil {
			return 0, fmt.Errorf("read OOM kills of cgroup %s: %w", g.rel, err)
		}
		return v, nil
	}
	dir := g.h.v1Dir(cgroup1.Memory, g.rel)
	if dir == "" {
		return 0, fmt.Errorf("read OOM kills of cgroup %s: memory controller not in use: %w", g.rel, ErrNotExist)
	}
	if _, err := os.Stat(dir); err != nil {
		return 0, fmt.Errorf("read OOM kills of cgroup %s: %w", dir, ErrNotExist)
	}
	var total uint64
	for _, r := range g.h.subtree(g.rel) {
		var v uint64
		err := readKeys(filepath.Join(g.h.v1Dir(cgroup1.Memory, r), "memory.oom_control"), map[string]*uint64{"oom_kill": &v})
		if err != nil {
			if isGone(err) {
				continue
			}
			return 0, fmt.Errorf("read OOM kills of cgroup %s: %w", dir, err)
		}
		total += v
	}
	return total, nil
}
