package config

import (
	"fmt"
	"runtime"

	"github.com/berthd/berth/limits"
)

// Host holds the facts of a machine that validation checks a file against:
// which CPUs exist for cpu and cpuset limits, and which block devices exist
// for io limits. Parsing never reads the machine itself; the caller passes
// the facts in (LocalHost for the running machine, nil to skip every host
// check, as when a definition is checked away from the hosts that run it).
type Host struct {
	// OnlineCPUs are the CPU numbers online, ascending; nil when unknown
	// (then cpu limits are checked against runtime.NumCPU and cpuset CPUs
	// are not checked).
	OnlineCPUs []int
	// ResolveDevice maps an io limit's device to its whole disk; nil skips
	// the check.
	ResolveDevice limits.DeviceResolver
}

// LocalHost returns the facts of the running machine: its online CPUs
// (sysfs) and limits.ResolveDevice.
func LocalHost() *Host {
	h := &Host{ResolveDevice: limits.ResolveDevice}
	if cpus, err := limits.OnlineCPUs(); err == nil {
		h.OnlineCPUs = cpus
	}
	return h
}

// numCPU is the number of CPUs a cpu limit may use: the online CPUs, or
// runtime.NumCPU() when they are unknown; 0 with no host (no check).
func (h *Host) numCPU() int {
	if h == nil {
		return 0
	}
	if len(h.OnlineCPUs) > 0 {
		return len(h.OnlineCPUs)
	}
	return runtime.NumCPU()
}

// checkCpuset parses s and checks that every CPU in it is online.
func (h *Host) checkCpuset(s string) ([]int, error) {
	cpus, err := limits.ParseCPUList(s)
	if err != nil {
		return nil, err
	}
	if h == nil || h.OnlineCPUs == nil {
		return cpus, nil
	}
	on := map[int]bool{}
	for _, c := range h.OnlineCPUs {
		on[c] = true
	}
	for _, c := range cpus {
		if !on[c] {
			return nil, fmt.Errorf("CPU %d of %q is not online on this host (online: %s)", c, s, limits.FormatCPUList(h.OnlineCPUs))
		}
	}
	return cpus, nil
}

// checkDevice checks that an io limit's device resolves to a disk here.
func (h *Host) checkDevice(path string) error {
	if h == nil || h.ResolveDevice == nil {
		return nil
	}
	_, err := h.ResolveDevice(path)
	return err
}
