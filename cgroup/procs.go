package cgroup

// The processes of a group: every process in every hierarchy (Pids, what
// Kill signals), and the cheap list of one hierarchy or of the latest run's
// leaf (Processes, what the metrics read at every scrape).

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

// Pids lists every process in the group and its descendants, sorted, as the
// union of cgroup.procs over every hierarchy and every descendant cgroup
// (a process put into only some hierarchies is still listed). A process that
// has exited is no longer listed, even before it is reaped (kernel ≥ 5.x
// drops exiting tasks from cgroup.procs; verified on 6.18). A group that is
// gone has no processes. The agent's own pid is never listed: a v1
// cgroup.procs file names it while one of its launcher threads passes
// through the group (ForkInside), and nothing must ever signal it as a job.
//
// Errors: a cgroup.procs file cannot be read for a reason other than the
// cgroup disappearing meanwhile.
func (g *Group) Pids() ([]int, error) {
	var pids []int
	for _, dir := range g.h.dirs(g.rel) {
		got, err := procsRecursive(dir)
		if err != nil {
			return nil, fmt.Errorf("list processes of cgroup %s: %w", dir, err)
		}
		pids = append(pids, got...)
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// self is the agent's pid, left out of every process list of a group.
var self = os.Getpid()

// procsRecursive reads cgroup.procs of dir and every cgroup below it. Parts
// that vanish while walking (a concurrent Delete) are skipped.
func procsRecursive(dir string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		file := filepath.Join(p, "cgroup.procs")
		data, err := kernfile.Read(file)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		if err != nil {
			return err
		}
		if pids, err = appendPids(pids, data); err != nil {
			return fmt.Errorf("parse %s: %w", file, err)
		}
		return nil
	})
	return pids, err
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
	var dir string
	if leaf := g.leaf.Load(); leaf != nil && g.h.unifiedMount != "" {
		if pids, ok := g.leafProcesses(*leaf); ok {
			return pids, nil
		}
		dir = *leaf
	} else {
		dir = g.h.unifiedDir(g.rel)
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
		b, err := kernfile.Read(filepath.Join(d, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list processes of cgroup %s: %w", d, err)
		}
		if pids, err = appendPids(pids, b); err != nil {
			return fmt.Errorf("parse %s: %w", filepath.Join(d, "cgroup.procs"), err)
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

// subtree lists rel and every cgroup below it (relative paths) in the
// tree whose directory for a relative path dir gives ("" for none): one
// controller's tree (on a hybrid host the run leaves exist in cgroup2
// only). A directory without subdirectories is not listed at all
// (hasSubdirs).
func (h *Hierarchy) subtree(rel string, dir func(string) string) []string {
	out := []string{rel}
	var walk func(r string)
	walk = func(r string) {
		d := dir(r)
		if d == "" || !hasSubdirs(d) {
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

// hasSubdirs reports whether the cgroup directory dir may have child
// cgroups: a kernfs directory's link count is 2 plus its subdirectories
// (fs/kernfs/inode.c, kernfs_refresh_inode), so one stat(2) answers
// without listing the dozens of control files a cgroup holds. It reports
// true when the stat fails, so that the caller lists and meets the error.
func hasSubdirs(dir string) bool {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return true
	}
	return st.Nlink != 2
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
	var b []byte
	var err error
	// The leaf lies below the group's cgroup2 directory: read it through
	// the group's mountDir (anchored, no filepath.Rel and no mount-table
	// lock per scrape), else relative to the mount.
	m := g.h.unifiedMount
	d := g.h.dirsFor(g)
	if d.err == nil && d.unified.ok() && len(leaf) > len(m)+1 && leaf[len(m)] == '/' && strings.HasPrefix(leaf, m) &&
		strings.HasPrefix(leaf[len(m)+1:], d.unified.a.prefix) && strings.HasPrefix(leaf[len(m)+1+len(d.unified.a.prefix):], d.unified.rel) {
		b, err = d.unified.read(leaf[len(m)+1+len(d.unified.a.prefix)+len(d.unified.rel):]+"/cgroup.procs", *bp)
	} else {
		b, err = readUnder(m, leaf+"/cgroup.procs", *bp)
	}
	if err != nil {
		// The run ended and Kill removed its leaf: no process.
		return nil, errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV)
	}
	pids, err = appendPids(pids, b)
	if err != nil {
		return nil, false
	}
	return pids, true
}

// appendPids appends the pids of a cgroup.procs file's content b (one
// decimal pid per line, cgroup-v2.rst "cgroup.procs") to pids, leaving out
// the agent's own: a v1 cgroup.procs names it while one of its launcher
// threads passes through the group (ForkInside).
//
// Errors: a line is not a pid.
func appendPids(pids []int, b []byte) ([]int, error) {
	for len(b) > 0 {
		var line []byte
		line, b = kernfile.CutLine(b)
		if len(line) == 0 {
			continue
		}
		v, err := kernfile.Uint(line)
		if err != nil || v == 0 || v > math.MaxInt32 {
			return pids, fmt.Errorf("%q is not a pid", line)
		}
		if pid := int(v); pid != self {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// readUnder reads file, under the mount point mount, relative to the
// mount's cached fd (underMount): no walk from / on every open.
func readUnder(mount, file string, buf []byte) ([]byte, error) {
	dirFD, rel, err := underMount(mount, file)
	if err != nil {
		return nil, err
	}
	return kernfile.ReadAt(dirFD, rel, buf)
}
