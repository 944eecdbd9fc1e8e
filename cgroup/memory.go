package cgroup

// The memory controller: the hard limit, the swap limit, the protection,
// and the memory charged and OOM kills the kernel accounts. Sources:
// Documentation/admin-guide/cgroup-v2.rst "Memory" (memory.max,
// memory.high, memory.low, memory.swap.max, memory.current,
// memory.events) and Documentation/admin-guide/cgroup-v1/memory.rst
// (memory.limit_in_bytes, memory.memsw.limit_in_bytes,
// memory.usage_in_bytes, memory.oom_control). The limits are written by
// containerd with the corrections below; memory.high, v2 only, is a
// res.Unified key; memory.low, v2 only, is res.Memory.Reservation, which
// containerd's cgroup2 writes to memory.low.

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// v1Unlimited is the smallest value treated as "no limit" in a v1 limit file
// (the kernel shows PAGE_COUNTER_MAX pages, 9223372036854771712 bytes on
// 4 KiB pages).
const v1Unlimited = 1 << 62

// oomKillKey is the key of memory.events (v2) and memory.oom_control (v1,
// Linux ≥ 4.13) that counts OOM kills.
var oomKillKey = []string{"oom_kill"}

// memoryV1 is m as the v1 memory controller can take it: the deprecated
// kernel memory limit dropped (the kernel no longer accepts it,
// cgroup-v1/memory.rst), the reservation dropped (noted by Unenforced:
// containerd's cgroup1 would write it to memory.soft_limit_in_bytes, which
// is no protection but the opposite, the level above which the cgroup is
// the first reclaimed under pressure, cgroup-v1/memory.rst 7), the swap
// limit dropped (logged) where swap accounting is off.
func (h *Hierarchy) memoryV1(rel string, m *specs.LinuxMemory) *specs.LinuxMemory {
	if m == nil {
		return nil
	}
	mm := *m
	//lint:ignore SA1019 cleared precisely because the kernel no longer accepts it
	mm.Kernel = nil
	mm.Reservation = nil
	if mm.Swap != nil && !h.memswAvailable() {
		h.log.Warn("cgroup swap limit not applied: swap accounting is off (no memory.memsw.limit_in_bytes)", "cgroup", rel)
		mm.Swap = nil
	}
	return &mm
}

// memswAvailable reports whether v1 swap accounting is on.
func (h *Hierarchy) memswAvailable() bool {
	dir := h.v1Dir(cgroup1.Memory, "")
	if dir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
	return err == nil
}

// setMemoryAndSwap writes memory.limit_in_bytes and
// memory.memsw.limit_in_bytes in the order that keeps memsw >= limit true at
// every step, as the kernel requires (EINVAL otherwise;
// Documentation/admin-guide/cgroup-v1/memory.rst, 2.5): memsw first when the
// new memsw is at least the current limit, else the limit first. (containerd's
// cgroup1 Update means to do this but swaps the wrong pair of settings.)
// -1 means unlimited. With skipSame (NewExisting) nothing is written when
// both files already hold their value.
func (h *Hierarchy) setMemoryAndSwap(rel string, limit, swap int64, skipSame bool) error {
	dir := h.v1Dir(cgroup1.Memory, rel)
	if dir == "" {
		return nil
	}
	limitFile := filepath.Join(dir, "memory.limit_in_bytes")
	swapFile := filepath.Join(dir, "memory.memsw.limit_in_bytes")
	data, err := os.ReadFile(limitFile)
	if err != nil {
		return fmt.Errorf("read %s: %w", limitFile, err)
	}
	cur, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return fmt.Errorf("parse %s: %w", limitFile, err)
	}
	unl := func(v int64) int64 {
		if v < 0 {
			return math.MaxInt64
		}
		return v
	}
	if skipSame && memoryHolds(cur, limit) {
		if data, err := os.ReadFile(swapFile); err == nil {
			if curSwap, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && memoryHolds(curSwap, swap) {
				return nil
			}
		}
	}
	writes := []struct {
		file string
		v    int64
	}{{limitFile, limit}, {swapFile, swap}}
	if unl(swap) >= cur {
		writes[0], writes[1] = writes[1], writes[0]
	}
	for _, w := range writes {
		if err := os.WriteFile(w.file, []byte(strconv.FormatInt(w.v, 10)), 0); err != nil {
			return fmt.Errorf("write %d to %s: %w", w.v, w.file, err)
		}
	}
	return nil
}

// memoryHolds reports whether a v1 memory or memsw limit file that reads
// cur holds the limit want as setMemoryAndSwap writes it (-1: unlimited,
// which reads as the page counter's largest, LONG_MAX / PAGE_SIZE pages,
// include/linux/page_counter.h). A limit that is not a whole number of
// pages reads rounded down: it does not match, and is written.
func memoryHolds(cur, want int64) bool {
	if want < 0 {
		page := int64(os.Getpagesize())
		return cur >= math.MaxInt64/page*page
	}
	return cur == want
}

// memoryV2 takes the swap limit out of r, to be written by setSwapMax
// only where swap accounting exists; ToResources computes one even for
// -1 (unlimited), which is returned as -1. A memory limit of -1
// (unlimited, limits.Lift) becomes math.MaxInt64: cgroup2 writes the
// number as it is, memory.max takes no negative number, and the kernel
// clamps any byte count above its largest to "max" (page_counter_memparse).
func memoryV2(res *specs.LinuxResources, r *cgroup2.Resources) *int64 {
	if r.Memory == nil {
		return nil
	}
	if m := r.Memory.Max; m != nil && *m < 0 {
		unlimited := int64(math.MaxInt64)
		r.Memory.Max = &unlimited
	}
	swap := r.Memory.Swap
	r.Memory.Swap = nil
	if s := res.Memory.Swap; s != nil && *s < 0 {
		unlimited := int64(-1)
		swap = &unlimited
	}
	return swap
}

// setSwapMax writes memory.swap.max of rel on a unified host ("max" for a
// negative swap); where the file is absent (swap accounting off) it logs
// that the limit is not applied. A nil swap writes nothing.
func (h *Hierarchy) setSwapMax(rel string, swap *int64) error {
	if swap == nil {
		return nil
	}
	f := filepath.Join(h.unifiedDir(rel), "memory.swap.max")
	if _, err := os.Stat(f); err != nil {
		h.log.Warn("cgroup swap limit not applied: no memory.swap.max (swap accounting off)", "cgroup", rel)
		return nil
	}
	v := "max"
	if *swap >= 0 {
		v = strconv.FormatInt(*swap, 10)
	}
	if err := os.WriteFile(f, []byte(v), 0); err != nil {
		return fmt.Errorf("write %s: %w", f, err)
	}
	return nil
}

// readMemoryV2 reads memory.current and the oom_kill count of
// memory.events (which counts the group's descendants: a sharing group's
// node counts its jobs' kills) and, when full, memory.max and memory.low.
func readMemoryV2(d mountDir, buf []byte, u *Usage, full bool) error {
	var err error
	if u.MemoryBytes, err = d.number("memory.current", buf); err != nil {
		return err
	}
	var n [1]uint64
	if err := d.keyed("memory.events", buf, oomKillKey, n[:]); err != nil {
		return err
	}
	u.OOMKills = n[0]
	if !full {
		return nil
	}
	if u.Limits.MemoryLimitBytes, err = d.number("memory.max", buf); err != nil { // "max" reads as 0
		return err
	}
	u.Limits.MemoryLowBytes, err = d.number("memory.low", buf)
	return err
}

// readMemoryV1 reads memory.usage_in_bytes and the group's own oom_kill
// count of memory.oom_control (when not full, only if an OOM kill may have
// happened since it was last read: ownOOMKillsV1) and, when full,
// memory.limit_in_bytes.
func (g *Group) readMemoryV1(d mountDir, buf []byte, u *Usage, full bool) error {
	if !d.ok() {
		return nil
	}
	var err error
	if u.MemoryBytes, err = d.number("memory.usage_in_bytes", buf); err != nil {
		return err
	}
	if !full {
		u.OOMKills, err = g.ownOOMKillsV1(d, buf)
		return err
	}
	var n [1]uint64
	if err := d.keyed("memory.oom_control", buf, oomKillKey, n[:]); err != nil {
		return err
	}
	u.OOMKills = n[0]
	l, err := d.number("memory.limit_in_bytes", buf)
	if l < v1Unlimited {
		u.Limits.MemoryLimitBytes = l
	}
	return err
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
func (g *Group) OOMKills() (uint64, error) { return g.h.v.oomKills(g) }

// oomKillsV1 sums the oom_kill lines of memory.oom_control over rel and
// every cgroup below it in the v1 memory hierarchy.
func (h *Hierarchy) oomKillsV1(rel string) (uint64, error) {
	dir := h.v1Dir(cgroup1.Memory, rel)
	if dir == "" {
		return 0, fmt.Errorf("read OOM kills of cgroup %s: memory controller not in use: %w", rel, ErrNotExist)
	}
	if _, err := os.Stat(dir); err != nil {
		return 0, fmt.Errorf("read OOM kills of cgroup %s: %w", dir, ErrNotExist)
	}
	// v1 counts a kill in the cgroup it happened in only: the sum covers
	// the cgroups below rel in the memory controller's own tree (a run
	// leaf is made in cgroup2 only).
	memDir := func(r string) string { return h.v1Dir(cgroup1.Memory, r) }
	var total uint64
	for _, r := range h.subtree(rel, memDir) {
		f := filepath.Join(memDir(r), "memory.oom_control")
		b, err := kernfile.Read(f)
		if isGone(err) {
			continue
		}
		var n [1]uint64
		if err == nil {
			err = kernfile.Keyed(b, ' ', oomKillKey, n[:])
		}
		if err != nil {
			return 0, fmt.Errorf("read OOM kills of cgroup %s: %s: %w", dir, f, err)
		}
		total += n[0]
	}
	return total, nil
}

// MemoryV1Dir is the group's directory in the v1 memory controller, which
// holds its memory.usage_in_bytes and cgroup.event_control (the usage
// threshold notification, Documentation/admin-guide/cgroup-v1/memory.rst
// "Memory thresholds"). It is "" on a unified host and where the v1 memory
// controller is not in use. The directory may not exist (yet, or any more).
func (g *Group) MemoryV1Dir() string { return g.h.v1Dir(cgroup1.Memory, g.rel) }

// Watermark says what MemorySample.PeakBytes is the highest charge of.
type Watermark uint8

const (
	// NoWatermark: the kernel keeps none the group can read (v2 before
	// Linux 5.19, which has no memory.peak); PeakBytes is 0.
	NoWatermark Watermark = iota
	// WatermarkSinceLastSample: the watermark was reset when the previous
	// MemorySample read it, so it is the peak since then (v1
	// memory.max_usage_in_bytes, which any write resets,
	// cgroup-v1/memory.rst 5.4 and 5.5). The first sample of a group
	// reads the peak since it was made.
	WatermarkSinceLastSample
	// WatermarkSinceCreation: the watermark is never reset (v2
	// memory.peak, the peak since the cgroup was made). Since Linux 6.12
	// a write resets it for the writing descriptor only, which would
	// cost one descriptor held open per group: berth does not use it.
	WatermarkSinceCreation
)

// MemorySample is a group's memory figures as the usage history samples
// them (package recommend, every 10 to 30 seconds): the charge, the
// kernel's watermark, the inactive page cache, the OOM kill count and
// the hard limit in force.
type MemorySample struct {
	// CurrentBytes is the memory charged, page cache included (v2
	// memory.current, v1 memory.usage_in_bytes).
	CurrentBytes uint64
	// PeakBytes is the highest charge the kernel recorded (Peak says
	// since when).
	PeakBytes uint64
	Peak      Watermark
	// InactiveFileBytes is the page cache on the inactive LRU list (v2
	// memory.stat inactive_file, v1 total_inactive_file, which counts
	// the group's descendants as v2's does); valid when HasInactiveFile.
	InactiveFileBytes uint64
	HasInactiveFile   bool
	// OOMKills counts OOM kills in the group (as Usage.OOMKills).
	OOMKills uint64
	// LimitBytes is the hard memory limit berth applied, bytes, 0 when
	// unlimited (as Usage.Limits.MemoryLimitBytes).
	LimitBytes uint64
}

// inactiveFileKey is memory.stat's key of the inactive page cache: v2's,
// and v1's hierarchical total.
var (
	inactiveFileKey   = []string{"inactive_file"}
	inactiveFileKeyV1 = []string{"total_inactive_file"}
)

// statBufs are the buffers memory.stat is read into: longer than the
// other files (about 1.5 KiB on v2 with Linux 6.x, and growing with each
// release).
var statBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// MemorySample reads the group's memory figures: on a unified host
// memory.current, memory.peak (absent before Linux 5.19: NoWatermark),
// memory.stat and memory.events; on v1 memory.usage_in_bytes,
// memory.max_usage_in_bytes, which it then resets by writing 0 to it
// (so that the next sample's watermark is that interval's: one reader
// only, the agent's sampler, may call MemorySample on a v1 group),
// memory.stat and memory.oom_control (only when an OOM kill may have
// happened since it was last read, as Usage). Each file is read once
// through the same anchored directories as Usage.
//
// Errors: the group is gone (wrapping ErrNotExist); the memory
// controller is not in use for it (wrapping ErrNotExist too); a file
// cannot be read, parsed or, on v1, the watermark reset.
func (g *Group) MemorySample() (MemorySample, error) {
	s := MemorySample{LimitBytes: g.applied().MemoryLimitBytes}
	d := g.h.dirsFor(g)
	err := d.err
	if err == nil {
		bp, sp := readBufs.Get().(*[]byte), statBufs.Get().(*[]byte)
		if g.h.mode == Unified {
			err = readMemorySampleV2(d.unified, *bp, *sp, &s)
		} else {
			err = g.readMemorySampleV1(d.memory, *bp, *sp, &s)
		}
		readBufs.Put(bp)
		statBufs.Put(sp)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = errors.Join(err, ErrNotExist)
		}
		return MemorySample{}, fmt.Errorf("read memory sample of cgroup %s: %w", g.rel, err)
	}
	return s, nil
}

// readMemorySampleV2 reads s from the group's v2 directory d.
func readMemorySampleV2(d mountDir, buf, stat []byte, s *MemorySample) error {
	var err error
	if s.CurrentBytes, err = d.number("memory.current", buf); err != nil {
		return err
	}
	switch pk, err := d.number("memory.peak", buf); {
	case err == nil:
		s.PeakBytes, s.Peak = pk, WatermarkSinceCreation
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := readInactiveFile(d, stat, inactiveFileKey, s); err != nil {
		return err
	}
	var n [1]uint64
	if err := d.keyed("memory.events", buf, oomKillKey, n[:]); err != nil {
		return err
	}
	s.OOMKills = n[0]
	return nil
}

// readMemorySampleV1 reads s from the group's v1 memory directory d, and
// resets its watermark.
func (g *Group) readMemorySampleV1(d mountDir, buf, stat []byte, s *MemorySample) error {
	if !d.ok() {
		return fmt.Errorf("memory controller not in use: %w", ErrNotExist)
	}
	var err error
	if s.CurrentBytes, err = d.number("memory.usage_in_bytes", buf); err != nil {
		return err
	}
	if s.PeakBytes, err = d.number("memory.max_usage_in_bytes", buf); err != nil {
		return err
	}
	if err := d.write("memory.max_usage_in_bytes", "0"); err != nil {
		return err
	}
	s.Peak = WatermarkSinceLastSample
	if err := readInactiveFile(d, stat, inactiveFileKeyV1, s); err != nil {
		return err
	}
	s.OOMKills, err = g.ownOOMKillsV1(d, buf)
	return err
}

// readInactiveFile reads the inactive page cache (key) of d's memory.stat
// into s.
func readInactiveFile(d mountDir, buf []byte, key []string, s *MemorySample) error {
	n := [1]uint64{math.MaxUint64}
	if err := d.keyed("memory.stat", buf, key, n[:]); err != nil {
		return err
	}
	if n[0] != math.MaxUint64 {
		s.InactiveFileBytes, s.HasInactiveFile = n[0], true
	}
	return nil
}

// RelaxMemoryHigh lifts the group's memory.high to "max" for a stop of
// the job under memory pressure, and returns how to put back the value it
// had (restore). A task over memory.high is put to sleep in the kernel at
// each return to user space, up to 2 s at a time, only a fatal signal
// waking it (mm/memcontrol.c, mem_cgroup_handle_over_high): a job so
// throttled runs its stop handler in fits and may not finish within its
// stop_timeout. memory.max still bounds it meanwhile. Kubernetes' planned
// memory pressure agent relaxes memory.high the same way before it
// evicts (KEP-5986). Where the group has no memory.high (cgroup v1 memory,
// whose memory_high berth does not enforce; a hybrid host's
// controller-less cgroup2 tree) it does nothing and restore is nil.
//
// Errors: the file cannot be read or written (the group is gone).
func (g *Group) RelaxMemoryHigh() (restore func() error, err error) {
	dir := g.h.unifiedDir(g.rel)
	if dir == "" {
		return nil, nil
	}
	file := filepath.Join(dir, "memory.high")
	old, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("relax memory.high of %s: %w", g.rel, err)
	}
	prev := strings.TrimSpace(string(old))
	if prev == "max" {
		return nil, nil
	}
	if err := os.WriteFile(file, []byte("max"), 0); err != nil {
		return nil, fmt.Errorf("relax memory.high of %s: %w", g.rel, err)
	}
	return func() error {
		if err := os.WriteFile(file, []byte(prev), 0); err != nil {
			return fmt.Errorf("restore memory.high %s of %s: %w", prev, g.rel, err)
		}
		return nil
	}, nil
}
