package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/berthd/berth/internal/kernfile"
	"golang.org/x/sys/unix"
)

// ErrNoPressure is returned (wrapped, with the reason) by Group.Pressure
// when the kernel keeps no pressure stall information (PSI) for the group:
// the host has no cgroup2 hierarchy (legacy v1), the kernel was built
// without CONFIG_PSI or booted with psi=0 (a kernel built with
// CONFIG_PSI_DEFAULT_DISABLED needs psi=1 on its command line), or PSI was
// switched off for the group by writing 0 to its cgroup.pressure. It is a
// property of the host, not a transient failure: a caller reports no
// pressure at all (never zeros) and logs the reason once.
var ErrNoPressure = errors.New("no pressure stall information (PSI)")

// StallTime is one resource's pressure file (cpu.pressure, memory.pressure,
// io.pressure) reduced to its cumulative totals, in seconds. The kernel
// gives the totals in microseconds (the total= field of each line) and they
// never go down while the cgroup exists. Source:
// Documentation/accounting/psi.rst.
type StallTime struct {
	// SomeSeconds is the "some" line's total: the time, in seconds, during
	// which at least one task of the group was delayed waiting for the
	// resource.
	SomeSeconds float64
	// FullSeconds is the "full" line's total: the time, in seconds, during
	// which every non-idle task of the group was delayed on the resource at
	// once. Valid only when HasFull.
	FullSeconds float64
	// HasFull is false when the file has no "full" line (cpu.pressure
	// before Linux 5.13); FullSeconds is then 0 and must not be reported.
	HasFull bool
}

// Pressure is a group's pressure stall information, one StallTime per
// resource, for the group and all its descendants.
type Pressure struct {
	// CPU is cpu.pressure: time runnable tasks waited for a CPU, including
	// time held back by the group's CPU quota.
	CPU StallTime
	// Memory is memory.pressure: time spent in reclaim, in memory.high
	// throttling, refaulting the working set or swapping in.
	Memory StallTime
	// IO is io.pressure: time waiting for block I/O.
	IO StallTime
}

// pressureFiles are the resources read, in Pressure's field order.
var pressureFiles = []string{"cpu.pressure", "memory.pressure", "io.pressure"}

// Pressure reads the group's cpu.pressure, memory.pressure and io.pressure
// from its directory in the cgroup2 hierarchy. On a unified (v2) host that
// is the group's own cgroup; on a hybrid host it is the group's directory in
// the controller-less cgroup2 mount (/sys/fs/cgroup/unified), where the
// kernel keeps PSI per cgroup even without controllers: the stalls there
// are those of the job's tasks, whatever the v1 controllers do to them
// (e.g. v1 CFS quota throttling shows as cpu pressure).
//
// Errors: ErrNoPressure (wrapped, naming the reason) when the host has no
// cgroup2 hierarchy, or the group's directory exists but has no *.pressure
// files or the kernel refuses to read them (EOPNOTSUPP); ErrNotExist
// (wrapped) when the group's cgroup2 directory is gone; any other read or
// parse error names the file.
func (g *Group) Pressure() (Pressure, error) {
	if g.h.unifiedMount == "" {
		return Pressure{}, fmt.Errorf("read pressure of cgroup %s: %w: the host (%s) has no cgroup2 hierarchy", g.rel, ErrNoPressure, g.h.mode)
	}
	d := g.h.dirsFor(g)
	if d.err != nil {
		return Pressure{}, fmt.Errorf("read pressure of cgroup %s: %w", g.h.unifiedDir(g.rel), d.err)
	}
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	var p Pressure
	for i, out := range []*StallTime{&p.CPU, &p.Memory, &p.IO} {
		b, err := d.unified.read(pressureFiles[i], *bp)
		var dir string // for the messages: joined only on an error
		if err != nil {
			dir = g.h.unifiedDir(g.rel)
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
				return Pressure{}, fmt.Errorf("read pressure of cgroup %s: %w", dir, ErrNotExist)
			}
			return Pressure{}, fmt.Errorf("read pressure of cgroup %s: %w: %s is missing (kernel without CONFIG_PSI, PSI off at boot: psi=0 or CONFIG_PSI_DEFAULT_DISABLED without psi=1, or cgroup.pressure is 0)", dir, ErrNoPressure, pressureFiles[i])
		case errors.Is(err, unix.EOPNOTSUPP):
			return Pressure{}, fmt.Errorf("read pressure of cgroup %s: %w: reading %s: %v (PSI disabled in the kernel: boot with psi=1)", dir, ErrNoPressure, pressureFiles[i], err)
		case err != nil:
			return Pressure{}, fmt.Errorf("read pressure of cgroup %s: %w", dir, err)
		}
		st, err := parsePressure(b)
		if err != nil {
			dir = g.h.unifiedDir(g.rel)
			return Pressure{}, fmt.Errorf("read pressure of cgroup %s: parse %s: %w", dir, filepath.Join(dir, pressureFiles[i]), err)
		}
		*out = st
	}
	return p, nil
}

// parsePressure parses one pressure file: a "some" line and, since Linux
// 5.13 for cpu (always for memory and io), a "full" line, each
// "avg10=A avg60=A avg300=A total=MICROSECONDS" (psi.rst, "Pressure
// interface"). Lines with another first word are ignored, as the kernel may
// add some; only total= is used. A missing "some" line is an error.
func parsePressure(b []byte) (StallTime, error) {
	var st StallTime
	hasSome := false
	err := kernfile.Nested(b, func(kind, fields []byte) error {
		if string(kind) != "some" && string(kind) != "full" {
			return nil
		}
		us, found, err := kernfile.Field(fields, "total")
		if err != nil {
			return fmt.Errorf("%q line: total is not a number of microseconds: %w", kind, err)
		}
		if !found {
			return fmt.Errorf("%q line has no total= field: %q", kind, fields)
		}
		if string(kind) == "some" {
			st.SomeSeconds, hasSome = float64(us)/1e6, true
		} else {
			st.FullSeconds, st.HasFull = float64(us)/1e6, true
		}
		return nil
	})
	if err != nil {
		return StallTime{}, err
	}
	if !hasSome {
		return StallTime{}, fmt.Errorf("no \"some\" line in %q", b)
	}
	return st, nil
}
