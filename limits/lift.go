package limits

import (
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// The kernel's defaults, written for a limit a definition no longer sets
// (Documentation/admin-guide/cgroup-v2.rst; cgroup-v1/memory.rst,
// sched-bwc.rst, pids.rst, blkio-controller.rst), in runtime-spec terms as
// the cgroup package writes them:
//
//   - memory.max, memory.swap.max (v1 memory.limit_in_bytes,
//     memory.memsw.limit_in_bytes): Memory.Limit and Memory.Swap -1, "max";
//   - memory.high: Unified "max";
//   - cpu.max (v1 cpu.cfs_quota_us): CPU.Quota -1, "max", the period kept;
//   - cpu.weight 100 (v1 cpu.shares 1024): CPU.Shares DefaultShares and
//     Unified "100";
//   - pids.max: Pids.Limit -1, "max";
//   - io.weight "default 100": Unified, and BlockIO.Weight its v1
//     equivalent (IOWeightToBlkioWeight, as an io_weight of 100 would be);
//   - io.max (v1 blkio.throttle.*_device): a throttle entry of rate 0 for
//     each device and rate dropped; the v1 files take 0 as "no rule", on
//     v2 the cgroup package writes that rate as "max".
//
// A cpuset cannot be lifted in place this way (a v1 cpuset has no value
// meaning "the parent's"; see CpusetRemoved).
const (
	// DefaultWeight is the kernel's cpu.weight and io.weight.
	DefaultWeight = 100
	// DefaultShares is the kernel's v1 cpu.shares.
	DefaultShares = 1024
)

// Unlimited is the runtime-spec value for "no limit" (-1) of a memory,
// swap, CPU quota or pids limit.
const Unlimited = -1

// Lift returns next with the kernel's default written out for every
// resource prev sets and next does not, so that an in-place update
// (cgroup.Group.Update, which leaves a nil resource as the kernel holds
// it) takes a limit removed from a definition out of the cgroup, as
// systemd does when a property is removed and the unit reloaded. prev is
// what was last written to the cgroup (the previous definition's
// Resources); next is not changed. A nil prev gives next; a nil next is
// taken as no limits.
func Lift(prev, next *specs.LinuxResources) *specs.LinuxResources {
	if next == nil {
		next = &specs.LinuxResources{}
	}
	if prev == nil {
		return next
	}
	r := *next
	if r.Unified != nil {
		r.Unified = map[string]string{}
		for k, v := range next.Unified {
			r.Unified[k] = v
		}
	}
	setUnified := func(k, v string) {
		if _, was := prev.Unified[k]; !was {
			return
		}
		if _, is := r.Unified[k]; is {
			return
		}
		if r.Unified == nil {
			r.Unified = map[string]string{}
		}
		r.Unified[k] = v
	}
	unlimited := func() *int64 { v := int64(Unlimited); return &v }

	if pm := prev.Memory; pm != nil {
		var m specs.LinuxMemory
		if r.Memory != nil {
			m = *r.Memory
		}
		changed := false
		if pm.Limit != nil && m.Limit == nil {
			m.Limit, changed = unlimited(), true
		}
		if pm.Swap != nil && m.Swap == nil {
			m.Swap, changed = unlimited(), true
		}
		if changed {
			r.Memory = &m
		}
	}
	setUnified(UnifiedMemoryHigh, "max")

	if pc := prev.CPU; pc != nil {
		var c specs.LinuxCPU
		if r.CPU != nil {
			c = *r.CPU
		}
		changed := false
		if pc.Quota != nil && c.Quota == nil {
			c.Quota, changed = unlimited(), true
			if c.Period == nil {
				c.Period = pc.Period
			}
		}
		if pc.Shares != nil && c.Shares == nil {
			s := uint64(DefaultShares)
			c.Shares, changed = &s, true
		}
		if changed {
			r.CPU = &c
		}
	}
	setUnified(UnifiedCPUWeight, strconv.Itoa(DefaultWeight))

	if pp := prev.Pids; pp != nil && pp.Limit != nil && (r.Pids == nil || r.Pids.Limit == nil) {
		r.Pids = &specs.LinuxPids{Limit: unlimited()}
	}

	if pb := prev.BlockIO; pb != nil {
		var b specs.LinuxBlockIO
		if r.BlockIO != nil {
			b = *r.BlockIO
		}
		changed := false
		if pb.Weight != nil && b.Weight == nil {
			w := IOWeightToBlkioWeight(DefaultWeight)
			b.Weight, changed = &w, true
		}
		lift := func(prev, next []specs.LinuxThrottleDevice) []specs.LinuxThrottleDevice {
			out := next
			for _, p := range prev {
				kept := false
				for _, n := range next {
					if n.Major == p.Major && n.Minor == p.Minor {
						kept = true
						break
					}
				}
				if !kept {
					out = append(out[:len(out):len(out)], specs.LinuxThrottleDevice{LinuxBlockIODevice: p.LinuxBlockIODevice})
					changed = true
				}
			}
			return out
		}
		b.ThrottleReadBpsDevice = lift(pb.ThrottleReadBpsDevice, b.ThrottleReadBpsDevice)
		b.ThrottleWriteBpsDevice = lift(pb.ThrottleWriteBpsDevice, b.ThrottleWriteBpsDevice)
		b.ThrottleReadIOPSDevice = lift(pb.ThrottleReadIOPSDevice, b.ThrottleReadIOPSDevice)
		b.ThrottleWriteIOPSDevice = lift(pb.ThrottleWriteIOPSDevice, b.ThrottleWriteIOPSDevice)
		if changed {
			r.BlockIO = &b
		}
	}
	setUnified(UnifiedIOWeight, "default "+strconv.Itoa(DefaultWeight))
	return &r
}

// everyLimit sets every resource Defaults lifts without knowing the
// previous value: memory, swap, memory.high, CPU quota and weight, pids.
// Not the io throttles (their devices are not known), nor the io weight
// (its file exists only with the io scheduler that uses it: io.bfq.weight,
// v1 blkio.weight, v2 io.weight with iocost; writing it where it is
// missing fails the whole write), nor the cpuset.
var everyLimit = func() *specs.LinuxResources {
	one, u := int64(1), uint64(1)
	return &specs.LinuxResources{
		Memory:  &specs.LinuxMemory{Limit: &one, Swap: &one},
		CPU:     &specs.LinuxCPU{Quota: &one, Shares: &u},
		Pids:    &specs.LinuxPids{Limit: &one},
		Unified: map[string]string{UnifiedMemoryHigh: "", UnifiedCPUWeight: ""},
	}
}()

// Defaults returns next with the kernel's default written out for every
// resource it does not set, for a cgroup whose earlier limits are not
// known: the one of a run an earlier agent started, adopted by this one,
// whose definition may have dropped a limit while no agent ran. The io
// limits next does not set and the cpuset are left as they are (see
// everyLimit).
func Defaults(next *specs.LinuxResources) *specs.LinuxResources {
	return Lift(everyLimit, next)
}

// CpusetRemoved reports whether old sets a cpuset that new does not: the
// one limit Lift cannot take out in place, so such a change needs the
// cgroup made anew.
func CpusetRemoved(old, new Limits) bool {
	return old.Cpuset != "" && new.Cpuset == ""
}
