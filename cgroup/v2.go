package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// newV2 makes rel on a unified host and applies res
// (Documentation/admin-guide/cgroup-v2.rst).
func (h *Hierarchy) newV2(rel string, res *specs.LinuxResources) (*cgroup2.Manager, error) {
	r, swap := v2Resources(res)
	m, err := cgroup2.NewManager(h.unifiedMount, filepath.Join(h.unifiedRoot, rel), r)
	if err != nil {
		return nil, err
	}
	if err := h.finishV2(m, rel, res, swap); err != nil {
		return nil, err
	}
	return m, nil
}

// updateV2 applies res in place on a unified host.
func (h *Hierarchy) updateV2(m *cgroup2.Manager, rel string, res *specs.LinuxResources) error {
	r, swap := v2Resources(res)
	if err := m.ToggleControllers(r.EnabledControllers(), cgroup2.Enable); err != nil {
		return err
	}
	if err := m.Update(r); err != nil {
		return err
	}
	return h.finishV2(m, rel, res, swap)
}

// finishV2 writes what cgroup2.Resources cannot say safely: memory.swap.max
// only where swap accounting exists, and every res.Unified key verbatim.
func (h *Hierarchy) finishV2(m *cgroup2.Manager, rel string, res *specs.LinuxResources, swap *int64) error {
	dir := h.unifiedDir(rel)
	if swap != nil {
		f := filepath.Join(dir, "memory.swap.max")
		if _, err := os.Stat(f); err != nil {
			h.log.Warn("cgroup swap limit not applied: no memory.swap.max (swap accounting off)", "cgroup", rel)
		} else {
			v := "max"
			if *swap >= 0 {
				v = strconv.FormatInt(*swap, 10)
			}
			if err := os.WriteFile(f, []byte(v), 0); err != nil {
				return fmt.Errorf("write %s: %w", f, err)
			}
		}
	}
	if len(res.Unified) == 0 {
		return nil
	}
	keys := make([]string, 0, len(res.Unified))
	var ctrls []string
	for k := range res.Unified {
		if strings.ContainsRune(k, '/') || !strings.Contains(k, ".") {
			return fmt.Errorf("unified key %q is not a cgroup file name", k)
		}
		keys = append(keys, k)
		if c, _, _ := strings.Cut(k, "."); c != "cgroup" && !slices.Contains(ctrls, c) {
			ctrls = append(ctrls, c)
		}
	}
	slices.Sort(keys)
	if err := m.ToggleControllers(ctrls, cgroup2.Enable); err != nil {
		return err
	}
	for _, k := range keys {
		f := filepath.Join(dir, k)
		if err := os.WriteFile(f, []byte(res.Unified[k]), 0); err != nil {
			return fmt.Errorf("write %s: %w", f, err)
		}
	}
	return nil
}

// v2Resources converts res with cgroup2.ToResources, fixing two spots: a
// negative CPU quota means "max" (cpu.max takes no negative number), and the
// swap limit is returned apart so that it is written only where
// memory.swap.max exists. Devices are dropped: berth does not use the device
// controller.
func v2Resources(res *specs.LinuxResources) (*cgroup2.Resources, *int64) {
	r := cgroup2.ToResources(res)
	r.Devices = nil
	if c := res.CPU; c != nil && r.CPU != nil && c.Quota != nil && *c.Quota < 0 {
		r.CPU.Max = cgroup2.NewCPUMax(nil, c.Period)
	}
	if c := res.CPU; c != nil && r.CPU != nil && c.Quota != nil && c.Period == nil && *c.Quota >= 0 {
		// ToResources drops a quota without a period; the kernel's default
		// period is 100000 µs (Documentation/scheduler/sched-bwc.rst).
		r.CPU.Max = cgroup2.NewCPUMax(c.Quota, nil)
	}
	if p := res.Pids; p != nil && p.Limit != nil && *p.Limit <= 0 {
		// cgroup2.Pids writes nothing for 0; the runtime spec means
		// unlimited, which pids.max spells "max".
		r.Pids = &cgroup2.Pids{Max: -1}
	}
	var swap *int64
	if r.Memory != nil {
		swap = r.Memory.Swap
		r.Memory.Swap = nil
		if s := res.Memory.Swap; s != nil && *s < 0 {
			// ToResources computes swap-limit even for -1 (unlimited).
			unlimited := int64(-1)
			swap = &unlimited
		}
	}
	return r, swap
}
