package limits

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// ParseCPUList parses a list in the kernel's cpuset list format ("0-3,6",
// Documentation/admin-guide/cgroup-v1/cpusets.rst "List format") and
// returns the CPU numbers in ascending order without duplicates.
//
// It returns an error for an empty list, an empty element, a range whose
// end is below its start, a number that is not a decimal integer >= 0 or
// is above 4095.
func ParseCPUList(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty CPU list")
	}
	seen := map[int]bool{}
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := cpuNumber(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = cpuNumber(hi); err != nil {
				return nil, fmt.Errorf("CPU list %q: %w", s, err)
			}
			if b < a {
				return nil, fmt.Errorf("CPU list %q: range %q ends before it starts", s, part)
			}
		}
		for c := a; c <= b; c++ {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

func cpuNumber(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a CPU number", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > 4095 {
		return 0, fmt.Errorf("%q is not a CPU number (0..4095)", s)
	}
	return n, nil
}

// onlineCPUsFile lists the CPUs the kernel has online
// (Documentation/ABI/testing/sysfs-devices-system-cpu).
const onlineCPUsFile = "/sys/devices/system/cpu/online"

// host holds the facts of this machine that validation checks against.
type host struct {
	online  []int // online CPUs; nil when unknown
	resolve func(path string) (Device, error)
}

// thisHost reads the facts of the running machine.
func thisHost() *host {
	h := &host{resolve: ResolveDevice}
	if b, err := os.ReadFile(onlineCPUsFile); err == nil {
		if cpus, err := ParseCPUList(string(b)); err == nil {
			h.online = cpus
		}
	}
	return h
}

// numCPU is the number of CPUs a cpu limit may use: the online CPUs, or
// runtime.NumCPU() when sysfs is not readable.
func (h *host) numCPU() int {
	if len(h.online) > 0 {
		return len(h.online)
	}
	return runtime.NumCPU()
}

// checkCpuset parses s and checks that every CPU in it is online.
func (h *host) checkCpuset(s string) ([]int, error) {
	cpus, err := ParseCPUList(s)
	if err != nil {
		return nil, err
	}
	if h.online == nil {
		return cpus, nil
	}
	on := map[int]bool{}
	for _, c := range h.online {
		on[c] = true
	}
	for _, c := range cpus {
		if !on[c] {
			return nil, fmt.Errorf("CPU %d of %q is not online on this host (online: %s)", c, s, formatCPUList(h.online))
		}
	}
	return cpus, nil
}

// formatCPUList writes cpus (ascending) in list format.
func formatCPUList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
