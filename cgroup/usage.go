package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Usage is what changes in a job's cgroup from one scrape to the next: the
// counters and gauges of Stats without the limits (which berth wrote and
// knows: see Applied) and without block I/O (reported per sharing group
// only). Counters never go down while the group exists.
type Usage struct {
	// CPUUserSeconds and CPUSystemSeconds are CPU time in user and kernel
	// mode, seconds (cgroup2 cpu.stat user_usec, system_usec, which the
	// kernel keeps for every cgroup2 cgroup, with or without the cpu
	// controller: so also in the tracking tree of a hybrid host; on a
	// legacy host v1 cpuacct.usage_user, cpuacct.usage_sys).
	CPUUserSeconds, CPUSystemSeconds float64
	// ThrottledPeriods and ThrottledSeconds are the CFS periods in which
	// the group hit its quota and the time it was held back, seconds (v1
	// cpu.stat nr_throttled, throttled_time; v2 cpu.stat nr_throttled,
	// throttled_usec).
	ThrottledPeriods uint64
	ThrottledSeconds float64
	// MemoryBytes is memory charged to the group, bytes (v1
	// memory.usage_in_bytes; v2 memory.current).
	MemoryBytes uint64
	// OOMKills counts OOM kills in the group and its descendants (see
	// Group.OOMKills).
	OOMKills uint64
	// Pids is pids.current: tasks (threads count) in the group.
	Pids uint64
}

// Applied is the part of a group's limits that metrics report, as the
// kernel holds it after berth wrote it: known from what New and Update
// applied, never read back at scrape time.
type Applied struct {
	// CPUQuotaCores is quota/period in cores, 0 when unlimited.
	CPUQuotaCores float64
	// MemoryLimitBytes is the hard memory limit in bytes, rounded down to
	// whole pages as the kernel stores it (page_counter_memparse), 0 when
	// unlimited.
	MemoryLimitBytes uint64
	// PidsLimit is pids.max, 0 when unlimited.
	PidsLimit uint64

	quota  int64  // µs, < 0 unlimited
	period uint64 // µs, 0: the kernel's default
}

// defaultPeriodMicros is the kernel's default CFS period,
// Documentation/scheduler/sched-bwc.rst.
const defaultPeriodMicros = 100000

// merge returns a with the fields res sets (nil fields keep a's), as New
// and Update write them.
func (a Applied) merge(res *specs.LinuxResources) Applied {
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
	if m := res.Memory; m != nil && m.Limit != nil {
		a.MemoryLimitBytes = 0
		if *m.Limit > 0 {
			page := uint64(os.Getpagesize())
			a.MemoryLimitBytes = uint64(*m.Limit) / page * page
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

// Applied returns the limits berth applied to the group (New, Update). For
// a group that was loaded (Load), whose limits berth did not write in this
// process, they are read from the kernel once and then kept.
func (g *Group) Applied() Applied {
	if a := g.applied.Load(); a != nil {
		return *a
	}
	a := Applied{quota: -1}
	if s, err := g.Stats(); err == nil {
		a.CPUQuotaCores, a.MemoryLimitBytes, a.PidsLimit = s.CPUQuotaCores, s.MemoryLimitBytes, s.PidsLimit
	}
	g.applied.CompareAndSwap(nil, &a)
	return *g.applied.Load()
}

// setApplied records that res was written to the group.
func (g *Group) setApplied(res *specs.LinuxResources) {
	cur := Applied{quota: -1}
	if a := g.applied.Load(); a != nil {
		cur = *a
	}
	next := cur.merge(res)
	g.applied.Store(&next)
}

// readBufs are the scratch buffers of control-file reads (4 KiB: every
// file a scrape reads is shorter).
var readBufs = sync.Pool{New: func() any { b := make([]byte, 4096); return &b }}

// readInto reads a small control or proc file (a seq_file: a read(2) with
// room to spare returns the whole content, so one short read means the
// end) into buf, with plain openat(2)/read(2)/close(2) and no allocation;
// it returns the bytes read. A file longer than buf is an error
// (errTooLong). dirFD is a directory fd the path is relative to, or
// unix.AT_FDCWD for an absolute path.
func readInto(dirFD int, path string, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(dirFD, path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == len(buf) {
			return nil, &fs.PathError{Op: "read", Path: path, Err: errTooLong}
		}
		return buf[:n], nil
	}
}

var errTooLong = errors.New("longer than the read buffer")

// ReadFileAt reads a small file of procfs or a cgroup file system into
// buf (see readInto) and returns the bytes read: the allocation-free read
// that the per-job metrics use for /proc/PID files. path is relative to
// the directory fd dirFD (an O_PATH fd of /proc, say), or absolute with
// unix.AT_FDCWD.
//
// Errors: the file cannot be opened or read (fs.PathError naming path,
// wrapping ENOENT or ESRCH when the process or cgroup is gone), or is
// longer than buf.
func ReadFileAt(dirFD int, path string, buf []byte) ([]byte, error) {
	return readInto(dirFD, path, buf)
}

// readUnder reads file, under the mount point mount, relative to the
// mount's cached fd (openIn): no walk from / on every open.
func readUnder(mount, file string, buf []byte) ([]byte, error) {
	dirFD, rel, err := underMount(mount, file)
	if err != nil {
		return nil, err
	}
	return readInto(dirFD, rel, buf)
}

// mountDir is one directory of a group, as Usage reads files in it: the
// cached fd of the mount it lies under (underMount) and the directory's
// path relative to it, with a trailing slash; fd < 0 when the group has
// no such directory (controller not in use).
type mountDir struct {
	fd  int
	rel string
}

func (d mountDir) ok() bool { return d.fd >= 0 }

// read reads the file name in d into buf.
func (d mountDir) read(name string, buf []byte) ([]byte, error) {
	return readInto(d.fd, d.rel+name, buf)
}

// usageDirs are the directories Usage and Pressure read, found once per
// group: no path joining or cleaning per read.
type usageDirs struct {
	unified, cpu, cpuacct, memory, pids mountDir
	err                                 error
}

// dirsForUsage returns the group's usageDirs, computed on first use.
func (g *Group) dirsForUsage() *usageDirs {
	g.usageOnce.Do(func() {
		d := &usageDirs{}
		at := func(mount, dir string) mountDir {
			if dir == "" || d.err != nil {
				return mountDir{fd: -1}
			}
			fd, rel, err := underMount(mount, dir)
			if err != nil {
				d.err = err
				return mountDir{fd: -1}
			}
			return mountDir{fd: fd, rel: rel + "/"}
		}
		d.unified = at(g.h.unifiedMount, g.h.unifiedDir(g.rel))
		d.cpu = at(mountRoot, g.h.v1Dir(cgroup1.Cpu, g.rel))
		d.cpuacct = at(mountRoot, g.h.v1Dir(cgroup1.Cpuacct, g.rel))
		d.memory = at(mountRoot, g.h.v1Dir(cgroup1.Memory, g.rel))
		d.pids = at(mountRoot, g.h.v1Dir(cgroup1.Pids, g.rel))
		g.usage = d
	})
	return g.usage
}

// keyedValue returns the value of key in a flat keyed file's content
// ("key value" lines: cpu.stat, memory.oom_control, memory.events); found
// is false when the key is absent.
func keyedValue(b []byte, key string) (v uint64, found bool, err error) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) > len(key) && line[len(key)] == ' ' && string(line[:len(key)]) == key {
			v, err := parseUint(line[len(key)+1:])
			return v, true, err
		}
	}
	return 0, false, nil
}

// parseUint parses a decimal number, ignoring surrounding white space;
// "max" is 0.
func parseUint(b []byte) (uint64, error) {
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return 0, nil
	}
	var v uint64
	if len(b) == 0 {
		return 0, fmt.Errorf("parse %q: not a number", b)
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("parse %q: not a number", b)
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, fmt.Errorf("parse %q: %w", b, strconv.ErrRange)
		}
		v = v*10 + d
	}
	return v, nil
}

// Usage reads what changed in the group since the last scrape: a handful
// of files, each read once (see Usage for which), limits and I/O left out.
// A controller that is not in use leaves its fields zero. On a hybrid host
// CPU time comes from the cgroup2 tracking tree's cpu.stat, throttling
// from v1 cpu.stat. It reads the group's own files only, which suits a
// job's cgroup (berth makes nothing below it in the v1 hierarchies): on v1
// OOM kills are counted in the cgroup of the killed process and not
// propagated to its parents, so kills inside v1 memory cgroups that a job
// made below its own are not in Usage; OOMKills and Stats walk them.
//
// Errors: the group is gone (wrapping ErrNotExist); a control file cannot
// be read or parsed.
func (g *Group) Usage() (Usage, error) {
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	buf := *bp
	var u Usage
	var err error
	if g.h.mode == Unified {
		err = g.usageV2(&u, buf)
	} else {
		err = g.usageV1(&u, buf)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = errors.Join(err, ErrNotExist)
		}
		return Usage{}, fmt.Errorf("read usage of cgroup %s: %w", g.rel, err)
	}
	return u, nil
}

func (g *Group) usageV2(u *Usage, buf []byte) error {
	d := g.dirsForUsage()
	if d.err != nil {
		return d.err
	}
	b, err := d.unified.read("cpu.stat", buf)
	if err != nil {
		return err
	}
	user, _, err1 := keyedValue(b, "user_usec")
	sys, _, err2 := keyedValue(b, "system_usec")
	thr, _, err3 := keyedValue(b, "nr_throttled")
	thrUs, _, err4 := keyedValue(b, "throttled_usec")
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	u.CPUUserSeconds, u.CPUSystemSeconds = float64(user)/1e6, float64(sys)/1e6
	u.ThrottledPeriods, u.ThrottledSeconds = thr, float64(thrUs)/1e6
	if b, err = d.unified.read("memory.current", buf); err == nil {
		u.MemoryBytes, err = parseUint(b)
	}
	if optional(err) != nil {
		return err
	}
	if b, err = d.unified.read("memory.events", buf); err == nil {
		u.OOMKills, _, err = keyedValue(b, "oom_kill")
	}
	if optional(err) != nil {
		return err
	}
	if b, err = d.unified.read("pids.current", buf); err == nil {
		u.Pids, err = parseUint(b)
	}
	return optional(err)
}

// optional is err unless it says a controller's file is absent (the
// controller is not enabled for the group).
func optional(err error) error {
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

func (g *Group) usageV1(u *Usage, buf []byte) error {
	d := g.dirsForUsage()
	if d.err != nil {
		return d.err
	}
	if d.unified.ok() {
		b, err := d.unified.read("cpu.stat", buf)
		if err != nil {
			return err
		}
		user, _, err1 := keyedValue(b, "user_usec")
		sys, _, err2 := keyedValue(b, "system_usec")
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		u.CPUUserSeconds, u.CPUSystemSeconds = float64(user)/1e6, float64(sys)/1e6
	} else if d.cpuacct.ok() {
		us, err1 := readNumber(d.cpuacct, "cpuacct.usage_user", buf)
		sy, err2 := readNumber(d.cpuacct, "cpuacct.usage_sys", buf)
		if err := errors.Join(optional(err1), optional(err2)); err != nil {
			return err
		}
		u.CPUUserSeconds, u.CPUSystemSeconds = float64(us)/1e9, float64(sy)/1e9
	}
	if d.cpu.ok() {
		b, err := d.cpu.read("cpu.stat", buf)
		if err == nil {
			var ns uint64
			var err1, err2 error
			u.ThrottledPeriods, _, err1 = keyedValue(b, "nr_throttled")
			ns, _, err2 = keyedValue(b, "throttled_time")
			u.ThrottledSeconds = float64(ns) / 1e9
			err = errors.Join(err1, err2)
		}
		if err != nil {
			return err
		}
	}
	if d.memory.ok() {
		var err error
		if u.MemoryBytes, err = readNumber(d.memory, "memory.usage_in_bytes", buf); err != nil {
			return err
		}
		b, err := d.memory.read("memory.oom_control", buf)
		if err == nil {
			u.OOMKills, _, err = keyedValue(b, "oom_kill")
		}
		if err != nil {
			return err
		}
	}
	if d.pids.ok() {
		var err error
		if u.Pids, err = readNumber(d.pids, "pids.current", buf); err != nil {
			return err
		}
	}
	return nil
}

// readNumber reads a one-number file of d.
func readNumber(d mountDir, name string, buf []byte) (uint64, error) {
	b, err := d.read(name, buf)
	if err != nil {
		return 0, err
	}
	return parseUint(b)
}
