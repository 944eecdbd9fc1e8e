package cgroup

// The cpu controller: the CFS bandwidth limit (quota over period) and the
// weight, and the CPU time and throttling the kernel accounts.
// Sources: Documentation/admin-guide/cgroup-v2.rst "CPU" (cpu.max,
// cpu.weight, cpu.stat); Documentation/scheduler/sched-bwc.rst (v1
// cpu.cfs_quota_us, cpu.cfs_period_us, cpu.stat); cgroup-v1/cpuacct.rst
// (cpuacct.usage*). The limits are written by containerd (v2 cpu.max and
// cpu.weight; v1 cpu.cfs_quota_us, cpu.cfs_period_us and cpu.shares) with
// the corrections below.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// defaultPeriodMicros is the kernel's default CFS period, µs
// (Documentation/scheduler/sched-bwc.rst).
const defaultPeriodMicros = 100000

// cpuV2 corrects containerd's cpu.max for res.CPU: a negative quota means
// "max" (cpu.max takes no negative number), and a quota without a period
// is kept (ToResources drops it) over the kernel's default period.
func cpuV2(res *specs.LinuxResources, r *cgroup2.Resources) {
	c := res.CPU
	if c == nil || r.CPU == nil || c.Quota == nil {
		return
	}
	switch {
	case *c.Quota < 0:
		r.CPU.Max = cgroup2.NewCPUMax(nil, c.Period)
	case c.Period == nil:
		r.CPU.Max = cgroup2.NewCPUMax(c.Quota, nil)
	}
}

// cpuStatKeys are the cgroup2 cpu.stat keys Usage reads, in the order of
// readCPUV2's values: the first three exist in every cgroup2 cgroup, the
// others only where the cpu controller is enabled.
var cpuStatKeys = []string{"usage_usec", "user_usec", "system_usec", "nr_periods", "nr_throttled", "throttled_usec"}

// readCPUV2 reads cgroup2 cpu.stat (CPU time, throttling), which every
// cgroup2 cgroup has, and, when full, cpu.max, which exists only where the
// cpu controller is enabled.
func readCPUV2(d mountDir, buf []byte, u *Usage, full bool) error {
	var v [6]uint64
	if err := d.keyed("cpu.stat", buf, cpuStatKeys, v[:]); err != nil {
		return err
	}
	u.CPUUsageSeconds, u.CPUUserSeconds, u.CPUSystemSeconds = float64(v[0])/1e6, float64(v[1])/1e6, float64(v[2])/1e6
	u.Periods, u.ThrottledPeriods, u.ThrottledSeconds = v[3], v[4], float64(v[5])/1e6
	if !full {
		return nil
	}
	b, err := d.read("cpu.max", buf)
	if err != nil {
		return optional(err) // no cpu controller: no limit
	}
	if q, p, ok := strings.Cut(string(bytes.TrimSpace(b)), " "); ok {
		if u.Limits.CPUQuotaCores, err = quotaCores(q, p); err != nil {
			return fmt.Errorf("%scpu.max: %w", d.mountRel(), err)
		}
	}
	return nil
}

// v1CPUStatKeys are the v1 cpu.stat keys, in readCPUV1's order
// (throttled_time in ns).
var v1CPUStatKeys = []string{"nr_periods", "nr_throttled", "throttled_time"}

// readCPUV1 reads a v1 host's CPU time, from the cgroup2 tracking tree's
// cpu.stat on a hybrid host (the kernel keeps it without controllers) or
// from cpuacct on a legacy one, and its throttling from v1 cpu.stat; when
// full, also the quota (cpu.cfs_quota_us / cpu.cfs_period_us).
func readCPUV1(d *groupDirs, buf []byte, u *Usage, full bool) error {
	if d.unified.ok() {
		var v [3]uint64
		if err := d.unified.keyed("cpu.stat", buf, cpuStatKeys[:3], v[:]); err != nil {
			return err
		}
		u.CPUUsageSeconds, u.CPUUserSeconds, u.CPUSystemSeconds = float64(v[0])/1e6, float64(v[1])/1e6, float64(v[2])/1e6
	} else if d.cpuacct.ok() {
		all, err1 := d.cpuacct.number("cpuacct.usage", buf)
		user, err2 := d.cpuacct.number("cpuacct.usage_user", buf)
		sys, err3 := d.cpuacct.number("cpuacct.usage_sys", buf)
		if err := errors.Join(optional(err1), optional(err2), optional(err3)); err != nil {
			return err
		}
		u.CPUUsageSeconds, u.CPUUserSeconds, u.CPUSystemSeconds = float64(all)/1e9, float64(user)/1e9, float64(sys)/1e9
	}
	if !d.cpu.ok() {
		return nil
	}
	var v [3]uint64
	if err := d.cpu.keyed("cpu.stat", buf, v1CPUStatKeys, v[:]); err != nil {
		return err
	}
	u.Periods, u.ThrottledPeriods, u.ThrottledSeconds = v[0], v[1], float64(v[2])/1e9
	if !full {
		return nil
	}
	q, err := d.cpu.read("cpu.cfs_quota_us", buf)
	if err != nil {
		return err
	}
	quota := string(q) // buf is reused below
	p, err := d.cpu.read("cpu.cfs_period_us", buf)
	if err != nil {
		return err
	}
	if u.Limits.CPUQuotaCores, err = quotaCores(quota, string(p)); err != nil {
		return fmt.Errorf("%scpu.cfs_quota_us: %w", d.cpu.mountRel(), err)
	}
	return nil
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

// CPUCounters are a group's cumulative CPU figures that the usage
// history samples every second (package recommend): the CPU time used
// and the CFS periods run and throttled, with the quota in force.
type CPUCounters struct {
	// UsageSeconds is the CPU time used by the group and its
	// descendants, seconds (as Usage.CPUUsageSeconds).
	UsageSeconds float64
	// Periods and ThrottledPeriods are the CFS periods in which the group
	// ran and those in which it hit its quota (as Usage's); both stay 0
	// while no quota is in force.
	Periods, ThrottledPeriods uint64
	// QuotaCores is the CPU quota berth applied, cores (as
	// Usage.Limits.CPUQuotaCores), 0 when unlimited.
	QuotaCores float64
}

// cpuCounterKeys are the cgroup2 cpu.stat keys CPUCounters reads.
var cpuCounterKeys = []string{"usage_usec", "nr_periods", "nr_throttled"}

// CPUCounters reads the group's CPU counters from as few files as the
// host allows, for a reader that takes them every second: on a unified
// host the group's cpu.stat alone; on a hybrid host the cgroup2 tracking
// tree's cpu.stat for the usage, and the v1 cpu controller's cpu.stat
// only while a quota is in force (the kernel counts periods only then,
// Documentation/scheduler/sched-bwc.rst); on a legacy host v1
// cpuacct.usage, and v1 cpu.stat as on a hybrid one. Each file is read
// once, without allocating, through the same anchored directories as
// Usage; the quota is the one berth applied (no file read).
//
// Errors: the group is gone (wrapping ErrNotExist); a file cannot be read
// or parsed.
func (g *Group) CPUCounters() (CPUCounters, error) {
	c := CPUCounters{QuotaCores: g.applied().CPUQuotaCores}
	d := g.h.dirsFor(g)
	err := d.err
	if err == nil {
		bp := readBufs.Get().(*[]byte)
		err = readCPUCounters(g.h.mode, d, *bp, &c)
		readBufs.Put(bp)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = errors.Join(err, ErrNotExist)
		}
		return CPUCounters{}, fmt.Errorf("read CPU counters of cgroup %s: %w", g.rel, err)
	}
	return c, nil
}

// readCPUCounters reads c's counters on a host in mode m (CPUCounters).
func readCPUCounters(m Mode, d *groupDirs, buf []byte, c *CPUCounters) error {
	var v [3]uint64
	switch {
	case m == Unified:
		if err := d.unified.keyed("cpu.stat", buf, cpuCounterKeys, v[:]); err != nil {
			return err
		}
		c.UsageSeconds, c.Periods, c.ThrottledPeriods = float64(v[0])/1e6, v[1], v[2]
		return nil
	case d.unified.ok():
		if err := d.unified.keyed("cpu.stat", buf, cpuCounterKeys[:1], v[:1]); err != nil {
			return err
		}
		c.UsageSeconds = float64(v[0]) / 1e6
	case d.cpuacct.ok():
		ns, err := d.cpuacct.number("cpuacct.usage", buf)
		if err != nil {
			return err
		}
		c.UsageSeconds = float64(ns) / 1e9
	}
	if c.QuotaCores == 0 || !d.cpu.ok() {
		return nil
	}
	if err := d.cpu.keyed("cpu.stat", buf, v1CPUStatKeys[:2], v[:2]); err != nil {
		return err
	}
	c.Periods, c.ThrottledPeriods = v[0], v[1]
	return nil
}
