package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Usage is a group's usage as the kernel accounts it, for the group and
// all its descendants, and the limits in force on it: what the metrics
// collectors and the API report about a job's or a sharing group's
// cgroup. Counters (CPU*, Periods, Throttled*, OOMKills, IO*) never go
// down while the group exists. A controller that is not in use leaves its
// fields zero. Which file each field comes from is said in the file of its
// controller (cpu.go, memory.go, pids.go, io.go).
type Usage struct {
	// CPUUsageSeconds, CPUUserSeconds and CPUSystemSeconds are the CPU time
	// consumed, in all and in user and kernel mode, seconds (cgroup2
	// cpu.stat usage_usec, user_usec, system_usec, which the kernel keeps
	// for every cgroup2 cgroup, with or without the cpu controller: so also
	// in the tracking tree of a hybrid host; on a legacy host v1
	// cpuacct.usage, cpuacct.usage_user, cpuacct.usage_sys).
	CPUUsageSeconds, CPUUserSeconds, CPUSystemSeconds float64
	// Periods is the number of CFS enforcement periods in which the group
	// was runnable, ThrottledPeriods those in which it hit its quota, and
	// ThrottledSeconds the time it was held back, seconds (cpu.stat
	// nr_periods, nr_throttled; v1 throttled_time, ns; v2 throttled_usec).
	Periods, ThrottledPeriods uint64
	ThrottledSeconds          float64
	// MemoryBytes is the memory charged to the group, page cache included,
	// bytes: the figure the hard limit is enforced against (v2
	// memory.current; v1 memory.usage_in_bytes).
	MemoryBytes uint64
	// OOMKills counts the processes the OOM killer killed in the group and
	// its descendants (see Group.OOMKills).
	OOMKills uint64
	// Pids is pids.current: tasks (threads count) in the group.
	Pids uint64
	// IOReadBytes and IOWriteBytes are bytes read from and written to
	// block devices, summed over devices (v2 io.stat rbytes, wbytes; v1
	// blkio.throttle.io_service_bytes_recursive Read, Write). Writes
	// through the page cache are counted when written back, which on v1
	// may be charged to another cgroup. FullUsage only.
	IOReadBytes, IOWriteBytes uint64
	// Limits are the limits in force on the group.
	Limits Limits
}

// Limits are the limits of a group that berth reports, as the kernel holds
// them.
type Limits struct {
	// CPUQuotaCores is the CPU quota over its period, cores (v2 cpu.max;
	// v1 cpu.cfs_quota_us / cpu.cfs_period_us), 0 when unlimited.
	CPUQuotaCores float64
	// MemoryLimitBytes is the hard memory limit, bytes, in whole pages as
	// the kernel stores it (v2 memory.max; v1 memory.limit_in_bytes), 0
	// when unlimited.
	MemoryLimitBytes uint64
	// PidsLimit is pids.max, 0 when unlimited.
	PidsLimit uint64
	// MemoryLowBytes is the best-effort memory protection, bytes, in whole
	// pages as the kernel stores it (v2 memory.low), 0 when none and
	// always on v1, which has no such protection.
	MemoryLowBytes uint64
}

// Usage reads what changes in the group from one scrape to the next: CPU
// time and throttling, memory, OOM kills and tasks, each file read once
// (on v1, memory.oom_control only when the host's count of OOM kills has
// moved since the group's was last read, or a minute has passed: see
// oomcount.go; a kill then shows at most 0.1 s after it happened),
// with Limits as berth applied them (New, Update; for a loaded group read
// from the kernel once and then kept) and block I/O left out (reported per
// sharing group only, by FullUsage). It is the hot path of a scrape of
// thousands of jobs.
//
// It reads the group's own files only, which suits a job's cgroup (berth
// makes nothing below it in the v1 hierarchies): on v1 OOM kills are
// counted in the cgroup of the killed process and not propagated to its
// parents, so kills inside v1 memory cgroups that a job made below its own
// are not in Usage; OOMKills and FullUsage walk them.
//
// Errors: the group is gone (wrapping ErrNotExist); a control file cannot
// be read or parsed.
func (g *Group) Usage() (Usage, error) {
	u, err := g.read(false)
	if err != nil {
		return Usage{}, err
	}
	u.Limits = g.applied().Limits
	return u, nil
}

// FullUsage is Usage plus what a scrape of every job leaves out: block
// I/O, v1 OOM kills in cgroups below the group, and Limits read from the
// kernel rather than remembered. The API and the sharing groups' metrics
// use it.
//
// Errors: as Usage.
func (g *Group) FullUsage() (Usage, error) {
	return g.read(true)
}

func (g *Group) read(full bool) (Usage, error) {
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	var u Usage
	err := g.h.dirsFor(g).err
	if err == nil {
		u, err = g.h.v.read(g, *bp, full)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = errors.Join(err, ErrNotExist)
		}
		return Usage{}, fmt.Errorf("read usage of cgroup %s: %w", g.rel, err)
	}
	return u, nil
}

// applied is what New and Update wrote to a group: the Limits it reports
// and the CPU quota and period they come from.
type applied struct {
	Limits
	quota  int64  // µs, < 0 unlimited
	period uint64 // µs, 0: the kernel's default
}

// merge returns a with the fields res sets (nil fields keep a's), as New
// and Update write them on a host in mode m.
func (a applied) merge(res *specs.LinuxResources, m Mode) applied {
	if res == nil {
		return a
	}
	if c := res.CPU; c != nil {
		if c.Quota != nil {
			a.quota = *c.Quota
		}
		if c.Period != nil {
			a.period = *c.Period
		}
	}
	a.CPUQuotaCores = 0
	if p := a.period; a.quota > 0 {
		if p == 0 {
			p = defaultPeriodMicros
		}
		a.CPUQuotaCores = float64(a.quota) / float64(p)
	}
	page := uint64(os.Getpagesize())
	if mem := res.Memory; mem != nil && mem.Limit != nil {
		a.MemoryLimitBytes = 0
		if *mem.Limit > 0 {
			a.MemoryLimitBytes = uint64(*mem.Limit) / page * page
		}
	}
	if mem := res.Memory; mem != nil && mem.Reservation != nil && m == Unified {
		a.MemoryLowBytes = 0
		if *mem.Reservation > 0 {
			a.MemoryLowBytes = uint64(*mem.Reservation) / page * page
		}
	}
	if p := res.Pids; p != nil && p.Limit != nil {
		a.PidsLimit = 0
		if *p.Limit > 0 {
			a.PidsLimit = uint64(*p.Limit)
		}
	}
	return a
}

// applied returns the limits berth applied to the group (New, Update). For
// a group that was loaded (Load), whose limits berth did not write in this
// process, they are read from the kernel once and then kept.
func (g *Group) applied() applied {
	if a := g.limits.Load(); a != nil {
		return *a
	}
	a := applied{quota: -1}
	if u, err := g.FullUsage(); err == nil {
		a.Limits = u.Limits
	}
	g.limits.CompareAndSwap(nil, &a)
	return *g.limits.Load()
}

// setApplied records that res was written to the group.
func (g *Group) setApplied(res *specs.LinuxResources) {
	cur := applied{quota: -1}
	if a := g.limits.Load(); a != nil {
		cur = *a
	}
	next := cur.merge(res, g.h.mode)
	g.limits.Store(&next)
}

// readBufs are the scratch buffers of control-file reads (4 KiB: every
// file a scrape reads is shorter).
var readBufs = sync.Pool{New: func() any { b := make([]byte, 4096); return &b }}

// mountDir is one directory of a group, as Usage reads files in it: the
// anchor to read relative to and the directory's path from it, with a
// trailing slash; a nil anchor when the group has no such directory
// (controller not in use). For a job's directory (<root>/jobs/<id>) the
// anchor is its hierarchy's jobs directory, whose fd is held for every
// job, so an open walks two path components instead of four or five:
// measured, 0.6 to 1.2 µs less per open of a cgroup file, more with two
// threads reading (fewer shared dentries to take and release). Any other
// directory is read from the mount it lies under (underMount).
type mountDir struct {
	a   *anchor
	rel string
}

// anchor is a directory that mountDirs read relative to: fd is held for
// the life of the process; mountFD is the fd of the mount it lies under
// and prefix its path from there, with a trailing slash ("" when the
// anchor is the mount itself).
type anchor struct {
	fd, mountFD int
	prefix      string
}

func (d mountDir) ok() bool { return d.a != nil }

// mountRel is the directory's path from its mount, with a trailing slash.
func (d mountDir) mountRel() string { return d.a.prefix + d.rel }

// read reads the file name in d into buf. A file that an anchored path
// does not find is looked up again from the mount: the anchor is a jobs
// directory that may have been removed and made anew since it was opened
// (the held fd then names the removed one), and the path from the mount
// decides.
func (d mountDir) read(name string, buf []byte) ([]byte, error) {
	var p kernfile.Path
	b, err := kernfile.ReadPath(d.a.fd, p.Add(d.rel).Add(name), buf)
	if err != nil && d.a.prefix != "" && errors.Is(err, fs.ErrNotExist) {
		var p kernfile.Path
		return kernfile.ReadPath(d.a.mountFD, p.Add(d.a.prefix).Add(d.rel).Add(name), buf)
	}
	return b, err
}

// write writes s to the file name in d with one write(2), as a control
// file takes one value per write; like read, a file the anchored path
// does not find is looked up again from the mount.
func (d mountDir) write(name, s string) error {
	p := d.rel + name
	fd, err := unix.Openat(d.a.fd, p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && d.a.prefix != "" {
		p = d.a.prefix + p
		fd, err = unix.Openat(d.a.mountFD, p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return &fs.PathError{Op: "open", Path: d.mountRel() + name, Err: err}
	}
	_, err = unix.Write(fd, []byte(s))
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return &fs.PathError{Op: "write", Path: d.mountRel() + name, Err: err}
	}
	return nil
}

// number reads a single-value file of d ("max" reads as 0).
func (d mountDir) number(name string, buf []byte) (uint64, error) {
	b, err := d.read(name, buf)
	if err != nil {
		return 0, err
	}
	v, err := kernfile.Uint(b)
	if err != nil {
		return 0, fmt.Errorf("%s%s: %w", d.mountRel(), name, err)
	}
	return v, nil
}

// keyed reads the wanted keys of a flat keyed file of d into out.
func (d mountDir) keyed(name string, buf []byte, keys []string, out []uint64) error {
	b, err := d.read(name, buf)
	if err != nil {
		return err
	}
	if err := kernfile.Keyed(b, ' ', keys, out); err != nil {
		return fmt.Errorf("%s%s: %w", d.mountRel(), name, err)
	}
	return nil
}

// groupDirs are the directories of a group that Usage, FullUsage and
// Pressure read, found once per group: no path joining or cleaning per
// read. On a unified host only unified is set.
type groupDirs struct {
	unified, cpu, cpuacct, memory, pids mountDir
	err                                 error
}

// dirsFor returns g's groupDirs, computed on first use.
func (h *Hierarchy) dirsFor(g *Group) *groupDirs {
	g.dirsOnce.Do(func() {
		d := &groupDirs{}
		// at is dir (under mount) as a mountDir, anchored at jobs (the
		// hierarchy's jobs directory) when dir is a job's.
		at := func(mount, dir, jobs string) mountDir {
			if dir == "" || d.err != nil {
				return mountDir{}
			}
			if jobs != "" && filepath.Dir(dir) == jobs {
				if a, err := anchorAt(mount, jobs); err == nil {
					return mountDir{a: a, rel: filepath.Base(dir) + "/"}
				}
			}
			a, err := anchorAt(mount, mount)
			if err != nil {
				d.err = err
				return mountDir{}
			}
			rel, err := filepath.Rel(mount, dir)
			if err != nil || strings.HasPrefix(rel, "..") {
				d.err = fmt.Errorf("%s is not under %s", dir, mount)
				return mountDir{}
			}
			return mountDir{a: a, rel: rel + "/"}
		}
		d.unified = at(h.unifiedMount, h.unifiedDir(g.rel), h.unifiedDir(JobsDir))
		d.cpu = at(mountRoot, h.v1Dir(cgroup1.Cpu, g.rel), h.v1Dir(cgroup1.Cpu, JobsDir))
		d.cpuacct = at(mountRoot, h.v1Dir(cgroup1.Cpuacct, g.rel), h.v1Dir(cgroup1.Cpuacct, JobsDir))
		d.memory = at(mountRoot, h.v1Dir(cgroup1.Memory, g.rel), h.v1Dir(cgroup1.Memory, JobsDir))
		d.pids = at(mountRoot, h.v1Dir(cgroup1.Pids, g.rel), h.v1Dir(cgroup1.Pids, JobsDir))
		g.dirs = d
	})
	return g.dirs
}

// anchors holds every anchor, by directory: each mount's and each
// hierarchy's jobs directory, opened on first use and kept (a few per
// host, not per job).
var (
	anchorsMu sync.Mutex
	anchors   = map[string]*anchor{}
)

// anchorAt returns the anchor of the directory dir, which lies under (or
// is) the mount point mount, opening it on first use. Its fd is never
// closed: a mountDir may be reading through it.
//
// Errors: dir is not under mount, or cannot be opened.
func anchorAt(mount, dir string) (*anchor, error) {
	mountFD, rel, err := underMount(mount, dir)
	if err != nil {
		return nil, err
	}
	anchorsMu.Lock()
	defer anchorsMu.Unlock()
	if a, ok := anchors[dir]; ok {
		return a, nil
	}
	a := &anchor{fd: mountFD, mountFD: mountFD}
	if rel != "." {
		fd, err := unix.Openat(mountFD, rel, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
		}
		a.fd, a.prefix = fd, rel+"/"
	}
	anchors[dir] = a
	return a, nil
}

// optional is err unless it says a controller's file is absent (the
// controller is not enabled for the group).
func optional(err error) error {
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}
