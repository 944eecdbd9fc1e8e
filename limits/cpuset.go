package limits

import (
	"fmt"
	"os"
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

// OnlineCPUs returns the CPUs this host has online, ascending, from
// /sys/devices/system/cpu/online. It returns an error when the file cannot be
// read or parsed.
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile(onlineCPUsFile)
	if err != nil {
		return nil, fmt.Errorf("online CPUs: %w", err)
	}
	cpus, err := ParseCPUList(string(b))
	if err != nil {
		return nil, fmt.Errorf("online CPUs: %s: %w", onlineCPUsFile, err)
	}
	return cpus, nil
}

// FormatCPUList writes cpus (ascending, without duplicates) in the kernel's
// list format: FormatCPUList([]int{0, 1, 2, 6}) == "0-2,6".
func FormatCPUList(cpus []int) string {
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
