package cgroup

// The pids controller: pids.max, and the tasks pids.current counts
// (Documentation/admin-guide/cgroup-v2.rst "PID"; cgroup-v1/pids.rst).
// On v2 containerd writes pids.max; on v1 berth writes it itself, because
// a launcher thread of the agent passing through a job's v1 cgroups counts
// in pids.current there (ForkInside) and pids.max is raised by one for
// each such thread while it does.

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// pidsV2 corrects containerd's pids.max for res.Pids: cgroup2.Pids writes
// nothing for a limit <= 0, which the runtime spec means as unlimited and
// pids.max spells "max".
func pidsV2(res *specs.LinuxResources, r *cgroup2.Resources) {
	if p := res.Pids; p != nil && p.Limit != nil && *p.Limit <= 0 {
		r.Pids = &cgroup2.Pids{Max: -1}
	}
}

// readPids reads pids.current and, when full, pids.max, of d (a v2
// group's directory or a v1 pids cgroup; nothing when not in use).
func readPids(d mountDir, buf []byte, u *Usage, full bool) error {
	if !d.ok() {
		return nil
	}
	var err error
	if u.Pids, err = d.number("pids.current", buf); err != nil || !full {
		return err
	}
	u.Limits.PidsLimit, err = d.number("pids.max", buf) // "max" reads as 0
	return err
}

// setPidsMax writes a v1 group's pids.max for Update and New: "max" for
// limit <= 0 (unlimited, as the runtime spec says), else limit plus the
// launcher threads inside the group at this moment.
func (h *Hierarchy) setPidsMax(rel string, limit int64, skipSame bool) error {
	dir := h.v1Dir(cgroup1.Pids, rel)
	if dir == "" {
		return nil
	}
	file := filepath.Join(dir, "pids.max")
	h.pidsMu.Lock()
	defer h.pidsMu.Unlock()
	v := "max"
	if limit > 0 {
		v = strconv.FormatInt(limit+int64(h.pidsInside[rel]), 10)
	} else {
		limit = -1
	}
	if h.pidsInside[rel] > 0 {
		h.pidsLimits[rel] = limit // lowerPids restores this one
	}
	if skipSame {
		if cur, err := kernfile.Read(file); err == nil && strings.TrimSpace(string(cur)) == v {
			return nil
		}
	}
	if err := kernfile.Write(file, v); err != nil {
		return fmt.Errorf("write %s to %s: %w", v, file, err)
	}
	return nil
}

// pidsLevel is one berth cgroup, from <root>/jobs down to the group, whose
// pids.max the thread's presence would count against.
type pidsLevel struct {
	rel string
	fd  int // pids.max, open read-write
}

// raisePids records the launcher thread that has just entered every level
// and raises pids.max by one on each level that has a limit; it returns the
// levels to pass to lowerPids. A pids.max that cannot be written is left as
// it is: the fork then fails on it with the kernel's error (EAGAIN).
func (h *Hierarchy) raisePids(levels []pidsLevel) []pidsLevel {
	h.pidsMu.Lock()
	defer h.pidsMu.Unlock()
	for _, l := range levels {
		if h.pidsInside[l.rel] == 0 {
			h.pidsLimits[l.rel] = readPidsMax(l.fd)
		}
		h.pidsInside[l.rel]++
		if limit := h.pidsLimits[l.rel]; limit >= 0 {
			_ = writeAt(l.fd, strconv.FormatInt(limit+int64(h.pidsInside[l.rel]), 10))
		}
	}
	return levels
}

// lowerPids undoes raisePids for levels, before the thread leaves.
func (h *Hierarchy) lowerPids(levels []pidsLevel) error {
	h.pidsMu.Lock()
	defer h.pidsMu.Unlock()
	var errs []error
	for _, l := range levels {
		h.pidsInside[l.rel]--
		n := h.pidsInside[l.rel]
		limit := h.pidsLimits[l.rel]
		if n <= 0 {
			delete(h.pidsInside, l.rel)
			delete(h.pidsLimits, l.rel)
		}
		if limit < 0 {
			continue
		}
		if err := writeAt(l.fd, strconv.FormatInt(limit+int64(n), 10)); err != nil {
			errs = append(errs, fmt.Errorf("restore pids.max %d of cgroup %s: %w", limit, l.rel, err))
		}
	}
	return errors.Join(errs...)
}

// readPidsMax reads an open pids.max file: the limit, or -1 for "max" (and
// for a file that cannot be read: it is then left alone).
func readPidsMax(fd int) int64 {
	var buf [32]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil {
		return -1
	}
	limit, err := strconv.ParseInt(strings.TrimSpace(string(buf[:n])), 10, 64)
	if err != nil {
		return -1 // "max"
	}
	return limit
}

func writeAt(fd int, s string) error {
	_, err := unix.Pwrite(fd, []byte(s), 0)
	return err
}
