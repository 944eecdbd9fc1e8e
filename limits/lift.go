package limits

import specs "github.com/opencontainers/runtime-spec/specs-go"

// The kernel's defaults, written for a limit a definition no longer sets
// (Documentation/admin-guide/cgroup-v2.rst; cgroup-v1/memory.rst,
// sched-bwc.rst, pids.rst, blkio-controller.rst), are in runtime-spec terms
// as the cgroup package writes them: each key's lift, in its row of the
// table of limits (keys, limits.go), names the files and the value. A
// cpuset cannot be lifted in place this way (a v1 cpuset has no value
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
// Resources); next is not changed, and the parts of it that no default is
// written into are shared with the result. A nil prev gives next; a nil
// next is taken as no limits. Each key's default is its row's (Keys).
func Lift(prev, next *specs.LinuxResources) *specs.LinuxResources {
	if next == nil {
		next = &specs.LinuxResources{}
	}
	if prev == nil {
		return next
	}
	w := newWriter(next, prev)
	for _, k := range keys {
		if k.lift != nil {
			k.lift(w)
		}
	}
	return w.result()
}

// Defaults returns next with the kernel's default written out for every
// resource it does not set, for a cgroup whose earlier limits are not
// known: the one of a run an earlier agent started, adopted by this one,
// whose definition may have dropped a limit while no agent ran. Only the
// keys whose default can be written blind are: not the io throttles (their
// devices are not known), nor the io weight (its file exists only with the
// io scheduler that uses it: io.bfq.weight, v1 blkio.weight, v2 io.weight
// with iocost; writing it where it is missing fails the whole write), nor
// the cpuset.
func Defaults(next *specs.LinuxResources) *specs.LinuxResources {
	if next == nil {
		next = &specs.LinuxResources{}
	}
	w := newWriter(next, nil)
	for _, k := range keys {
		if k.lift != nil && k.blind {
			k.lift(w)
		}
	}
	return w.result()
}

// removed reports whether a resource, which has says is set in a
// LinuxResources, is to be lifted: prev sets it (or prev is not known) and
// next does not.
func (w *writer) removed(has func(*specs.LinuxResources) bool) bool {
	return (w.prev == nil || has(w.prev)) && !has(w.next)
}

// liftUnified writes v, the kernel's default of the cgroup v2 file k, when
// the Unified key k is removed.
func (w *writer) liftUnified(k, v string) {
	if w.removed(func(r *specs.LinuxResources) bool { _, ok := r.Unified[k]; return ok }) {
		w.unified(k, v)
	}
}

// liftIO is io's lift (io.max, v1 blkio.throttle.*_device): a throttle
// entry of rate 0 for each device and rate prev throttles and next does
// not; the v1 files take 0 as "no rule", on v2 the cgroup package writes
// that rate as "max".
func liftIO(w *writer) {
	if w.prev == nil || w.prev.BlockIO == nil {
		return
	}
	for _, list := range []func(*specs.LinuxBlockIO) *[]specs.LinuxThrottleDevice{
		func(b *specs.LinuxBlockIO) *[]specs.LinuxThrottleDevice { return &b.ThrottleReadBpsDevice },
		func(b *specs.LinuxBlockIO) *[]specs.LinuxThrottleDevice { return &b.ThrottleWriteBpsDevice },
		func(b *specs.LinuxBlockIO) *[]specs.LinuxThrottleDevice { return &b.ThrottleReadIOPSDevice },
		func(b *specs.LinuxBlockIO) *[]specs.LinuxThrottleDevice { return &b.ThrottleWriteIOPSDevice },
	} {
		var next []specs.LinuxThrottleDevice
		if w.r.BlockIO != nil {
			next = *list(w.r.BlockIO)
		}
		out := next
		for _, p := range *list(w.prev.BlockIO) {
			kept := false
			for _, n := range next {
				if n.Major == p.Major && n.Minor == p.Minor {
					kept = true
					break
				}
			}
			if !kept {
				out = append(out[:len(out):len(out)], specs.LinuxThrottleDevice{LinuxBlockIODevice: p.LinuxBlockIODevice})
			}
		}
		if len(out) != len(next) {
			*list(w.blockIO()) = out
		}
	}
}

// CpusetRemoved reports whether old sets a cpuset that new does not: the
// one limit Lift cannot take out in place, so such a change needs the
// cgroup made anew.
func CpusetRemoved(old, new Limits) bool {
	return old.Cpuset != "" && new.Cpuset == ""
}
