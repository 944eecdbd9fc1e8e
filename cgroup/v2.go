package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// cgroupV2 drives the single hierarchy of a unified host through
// containerd's cgroup2 (Documentation/admin-guide/cgroup-v2.rst): one
// tree limits, accounts and tracks.
type cgroupV2 struct{ h *Hierarchy }

func (v cgroupV2) prepare() error { return v.h.prepareV2() }

func (v cgroupV2) create(g *Group, res *specs.LinuxResources) error {
	h := v.h
	r, swap, lifted := v2Resources(res)
	if g.existing && r.CPU != nil && r.CPU.Max != "" {
		// NewExisting: a cpu.max write walks every task group, as v1's
		// quota (skipSameCPU).
		if cur, err := kernfile.Read(filepath.Join(h.unifiedDir(g.rel), "cpu.max")); err == nil && strings.TrimSpace(string(cur)) == string(r.CPU.Max) {
			r.CPU.Max = ""
		}
	}
	m, err := cgroup2.NewManager(h.unifiedMount, filepath.Join(h.unifiedRoot, g.rel), r)
	if err == nil {
		err = v.finish(m, g.rel, res, swap, lifted)
	}
	if err != nil {
		return fmt.Errorf("create cgroup %s: %w", h.unifiedDir(g.rel), err)
	}
	g.v2 = m
	return nil
}

func (v cgroupV2) load(g *Group) error {
	m, err := cgroup2.Load(filepath.Join(v.h.unifiedRoot, g.rel), cgroup2.WithMountpoint(v.h.unifiedMount))
	if err != nil {
		return fmt.Errorf("load cgroup %s: %w", v.h.unifiedDir(g.rel), err)
	}
	g.v2 = m
	return nil
}

func (v cgroupV2) update(g *Group, res *specs.LinuxResources) error {
	r, swap, lifted := v2Resources(res)
	err := g.v2.ToggleControllers(r.EnabledControllers(), cgroup2.Enable)
	if err == nil {
		err = g.v2.Update(r)
	}
	if err == nil {
		err = v.finish(g.v2, g.rel, res, swap, lifted)
	}
	if err != nil {
		return fmt.Errorf("update cgroup %s: %w", v.h.unifiedDir(g.rel), err)
	}
	return nil
}

// finish writes what cgroup2.Resources cannot say safely: memory.swap.max
// only where swap accounting exists (memory.go), the io.max lines that
// lift a throttle (ioV2), and every res.Unified key verbatim, so that an
// exact "cpu.weight" or "memory.high" wins over the lossy shares→weight
// conversion; the controllers those keys need are enabled first.
func (v cgroupV2) finish(m *cgroup2.Manager, rel string, res *specs.LinuxResources, swap *int64, lifted []string) error {
	dir := v.h.unifiedDir(rel)
	if err := v.h.setSwapMax(rel, swap); err != nil {
		return err
	}
	for _, line := range lifted {
		f := filepath.Join(dir, "io.max")
		if err := os.WriteFile(f, []byte(line), 0); err != nil {
			return fmt.Errorf("write %q to %s: %w", line, f, err)
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

func (v cgroupV2) read(g *Group, buf []byte, full bool) (Usage, error) {
	var u Usage
	d := v.h.dirsFor(g).unified
	err := errors.Join(
		readCPUV2(d, buf, &u, full), // cpu.stat: its absence means the group is gone
		optional(readMemoryV2(d, buf, &u, full)),
		optional(readPids(d, buf, &u, full)),
	)
	if err != nil || !full {
		return u, err
	}
	return u, optional(readIOV2(v.h.unifiedDir(g.rel), &u))
}

func (v cgroupV2) oomKills(g *Group) (uint64, error) {
	d := v.h.dirsFor(g)
	err := d.err
	var n [1]uint64
	if err == nil {
		bp := readBufs.Get().(*[]byte)
		defer readBufs.Put(bp)
		err = d.unified.keyed("memory.events", *bp, oomKillKey, n[:])
	}
	if err != nil {
		return 0, fmt.Errorf("read OOM kills of cgroup %s: %w", g.rel, err)
	}
	return n[0], nil
}

// v2Resources converts res with cgroup2.ToResources, with each
// controller's corrections (cpuV2, memoryV2, pidsV2, ioV2); the swap limit
// is returned apart, to be written only where memory.swap.max exists, and
// so are the io.max lines that lift a throttle.
// Devices are dropped: berth does not use the device controller.
func v2Resources(res *specs.LinuxResources) (*cgroup2.Resources, *int64, []string) {
	r := cgroup2.ToResources(res)
	r.Devices = nil
	cpuV2(res, r)
	pidsV2(res, r)
	return r, memoryV2(res, r), ioV2(r)
}
