package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

// readSmall reads a cgroup control file with plain open(2)/read(2): os.Open
// would also try to register every cgroupfs file with the runtime's poller
// (epoll_ctl, refused for such files), which doubles the system calls of a
// scrape that reads a few files of every job.
func readSmall(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// readUint reads a file holding one unsigned number ("max" reads as 0).
func readUint(path string) (uint64, error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// readKeys parses a flat keyed file ("key value" lines: cpu.stat,
// memory.oom_control) into the wanted keys, with the parser the scrape
// uses (keyedValue); a key the file lacks is left as it was.
func readKeys(path string, want map[string]*uint64) error {
	b, err := readSmall(path)
	if err != nil {
		return err
	}
	for k, p := range want {
		v, found, err := keyedValue(b, k)
		if err != nil {
			return fmt.Errorf("parse %s %s: %w", path, k, err)
		}
		if found {
			*p = v
		}
	}
	return nil
}

// Processes lists the processes of the group and its descendants from one
// hierarchy (cgroup2 when mounted, else the v1 pids or freezer controller,
// whose directories hold few files): the cheap list for accounting at
// scrape time. Kill uses Pids, which reads every hierarchy. The agent's own
// pid is left out, as Pids does.
//
// Errors: cgroup.procs cannot be read for a reason other than the group
// disappearing.
//
// A group started with ForkInside on a host with cgroup2 has its processes
// in the leaf of its latest run: only that leaf's cgroup.procs is read,
// without listing any directory (see leafProcesses).
func (g *Group) Processes() ([]int, error) {
	dir := g.h.unifiedDir(g.rel)
	if leaf := g.leaf.Load(); leaf != nil && dir != "" {
		if pids, ok := g.leafProcesses(*leaf); ok {
			return pids, nil
		}
		dir = *leaf
	}
	if dir == "" {
		for _, name := range []cgroup1.Name{cgroup1.Pids, cgroup1.Freezer} {
			if d := g.h.v1Dir(name, g.rel); d != "" {
				dir = d
				break
			}
		}
	}
	if dir == "" {
		return g.Pids()
	}
	var pids []int
	var walk func(d string) error
	walk = func(d string) error {
		b, err := readSmall(filepath.Join(d, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list processes of cgroup %s: %w", d, err)
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("parse %s: %w", filepath.Join(d, "cgroup.procs"), err)
			}
			if pid != self { // a launcher thread passing through (see Pids)
				pids = append(pids, pid)
			}
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("list child cgroups of %s: %w", d, err)
		}
		for _, e := range entries {
			if e.IsDir() {
				if err := walk(filepath.Join(d, e.Name())); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return pids, walk(dir)
}

// subtree lists rel and every cgroup below it (relative paths), read from
// the hierarchy whose directories hold the fewest files (cgroup2, else the
// v1 pids or freezer controller): the same tree exists in every hierarchy.
func (h *Hierarchy) subtree(rel string) []string {
	base := func(r string) string {
		if d := h.unifiedDir(r); d != "" {
			return d
		}
		for _, name := range []cgroup1.Name{cgroup1.Pids, cgroup1.Freezer, cgroup1.Memory} {
			if d := h.v1Dir(name, r); d != "" {
				return d
			}
		}
		return ""
	}
	out := []string{rel}
	var walk func(r string)
	walk = func(r string) {
		d := base(r)
		if d == "" {
			return
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.IsDir() {
				c := filepath.Join(r, e.Name())
				out = append(out, c)
				walk(c)
			}
		}
	}
	walk(rel)
	return out
}

// statsV1 reads the v1 counters berth reports, file by file: containerd's
// cgroup1 Stat reads every file of every controller (memory.stat, kmem,
// hugetlb, …), several times the cost for figures that are not used.
func (g *Group) statsV1() (*Stats, error) {
	s := &Stats{}
	h, rel := g.h, g.rel
	optional := func(err error) error {
		if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		return err
	}
	var errs []error
	if d := h.v1Dir(cgroup1.Cpuacct, rel); d != "" {
		u, err1 := readUint(filepath.Join(d, "cpuacct.usage"))
		us, err2 := readUint(filepath.Join(d, "cpuacct.usage_user"))
		sy, err3 := readUint(filepath.Join(d, "cpuacct.usage_sys"))
		errs = append(errs, optional(err1), optional(err2), optional(err3))
		s.CPUUsageSeconds, s.CPUUserSeconds, s.CPUSystemSeconds = float64(u)/1e9, float64(us)/1e9, float64(sy)/1e9
	}
	if d := h.v1Dir(cgroup1.Cpu, rel); d != "" {
		var throttledNs uint64
		errs = append(errs, optional(readKeys(filepath.Join(d, "cpu.stat"), map[string]*uint64{
			"nr_periods": &s.Periods, "nr_throttled": &s.ThrottledPeriods, "throttled_time": &throttledNs})))
		s.ThrottledSeconds = float64(throttledNs) / 1e9
		q, qerr := readSmall(filepath.Join(d, "cpu.cfs_quota_us"))
		p, perr := readSmall(filepath.Join(d, "cpu.cfs_period_us"))
		if qerr == nil && perr == nil {
			c, err := quotaCores(string(q), string(p))
			errs = append(errs, err)
			s.CPUQuotaCores = c
		}
	}
	if d := h.v1Dir(cgroup1.Memory, rel); d != "" {
		u, err1 := readUint(filepath.Join(d, "memory.usage_in_bytes"))
		l, err2 := readUint(filepath.Join(d, "memory.limit_in_bytes"))
		errs = append(errs, optional(err1), optional(err2))
		s.MemoryBytes = u
		if l < v1Unlimited {
			s.MemoryLimitBytes = l
		}
	}
	if d := h.v1Dir(cgroup1.Pids, rel); d != "" {
		c, err1 := readUint(filepath.Join(d, "pids.current"))
		l, err2 := readUint(filepath.Join(d, "pids.max"))
		errs = append(errs, optional(err1), optional(err2))
		s.Pids, s.PidsLimit = c, l
	}
	if d := h.v1Dir(cgroup1.Blkio, rel); d != "" {
		b, err := readSmall(filepath.Join(d, "blkio.throttle.io_service_bytes_recursive"))
		errs = append(errs, optional(err))
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 {
				continue
			}
			v, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				continue
			}
			switch f[1] {
			case "Read":
				s.IOReadBytes += v
			case "Write":
				s.IOWriteBytes += v
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("read stats of cgroup %s: %w", rel, err)
	}
	var err error
	if s.OOMKills, err = g.OOMKills(); err != nil && !errors.Is(err, ErrNotExist) {
		return nil, err
	}
	return s, nil
}

// leafProcesses reads the processes of a run leaf with one read of its
// cgroup.procs, without listing the leaf's directory: processes a job
// moved into cgroup2 cgroups it made below its leaf are not listed (the
// cgroup accounting covers them all the same). ok is false when the leaf
// holds more processes than fit one read buffer: the caller then reads it
// in full.
func (g *Group) leafProcesses(leaf string) (pids []int, ok bool) {
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	b, err := readUnder(g.h.unifiedMount, leaf+"/cgroup.procs", *bp)
	if err != nil {
		// The run ended and Kill removed its leaf: no process.
		return nil, errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV)
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) == 0 {
			continue
		}
		v, err := parseUint(line)
		if err != nil {
			return nil, false
		}
		if pid := int(v); pid != self {
			pids = append(pids, pid)
		}
	}
	return pids, true
}
