package cgroup

// The io controller (v1 blkio): the per-device limits and the weight,
// written by containerd (v2 io.max, io.weight; v1 blkio.throttle.*,
// blkio.weight), and the bytes the kernel accounts per device. Sources:
// Documentation/admin-guide/cgroup-v2.rst "IO" (io.max, io.stat) and
// Documentation/admin-guide/cgroup-v1/blkio-controller.rst
// (blkio.throttle.io_service_bytes_recursive). Devices are resolved to
// whole disks by package limits before they reach this package.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ioV2 takes the throttle entries of rate 0 out of r and returns them as
// io.max lines that lift the limit ("MAJ:MIN rbps=max"): a rate of 0 is
// how the runtime spec and the v1 blkio.throttle.* files say "no rule"
// (limits.Lift), but cgroup2 would write it as it is, and io.max takes
// "max" for no limit (Documentation/admin-guide/cgroup-v2.rst "IO
// Interface Files").
func ioV2(r *cgroup2.Resources) []string {
	if r.IO == nil {
		return nil
	}
	var lines []string
	kept := r.IO.Max[:0]
	for _, e := range r.IO.Max {
		if e.Rate == 0 {
			lines = append(lines, fmt.Sprintf("%d:%d %s=max", e.Major, e.Minor, e.Type))
			continue
		}
		kept = append(kept, e)
	}
	r.IO.Max = kept
	return lines
}

// The I/O files grow with the host's devices, so they are read whole
// (kernfile.Read) rather than into a scrape's fixed buffer: only FullUsage
// reads them.

// readIOV2 sums rbytes and wbytes of io.stat in the group's directory dir
// over its devices (nested keyed: "MAJ:MIN rbytes=N wbytes=N rios=N ...").
func readIOV2(dir string, u *Usage) error {
	b, err := kernfile.Read(filepath.Join(dir, "io.stat"))
	if err != nil {
		return err
	}
	return kernfile.Nested(b, func(_, fields []byte) error {
		r, _, err := kernfile.Field(fields, "rbytes")
		if err != nil {
			return err
		}
		w, _, err := kernfile.Field(fields, "wbytes")
		u.IOReadBytes += r
		u.IOWriteBytes += w
		return err
	})
}

// readIOV1 sums the Read and Write lines of
// blkio.throttle.io_service_bytes_recursive ("MAJ:MIN Read N" per device
// and operation, then "Total N") in the group's v1 blkio directory dir,
// nothing when blkio is not in use (dir "").
func readIOV1(dir string, u *Usage) error {
	if dir == "" {
		return nil
	}
	b, err := kernfile.Read(filepath.Join(dir, "blkio.throttle.io_service_bytes_recursive"))
	if err != nil {
		return err
	}
	return kernfile.Nested(b, func(_, rest []byte) error {
		op, v, ok := bytes.Cut(rest, []byte{' '})
		if !ok {
			return nil // the "Total N" line
		}
		n, err := kernfile.Uint(v)
		if err != nil {
			return nil // not "OP NUMBER": skipped
		}
		switch string(op) {
		case "Read":
			u.IOReadBytes += n
		case "Write":
			u.IOWriteBytes += n
		}
		return nil
	})
}

// Throttles returns the per-device I/O throttles the group holds now, as
// runtime-spec entries (nil when none, or the io controller is not in
// use): v2 io.max ("MAJ:MIN rbps=N wbps=max riops=N wiops=max", a "max"
// is no limit), v1 blkio.throttle.{read,write}_{bps,iops}_device
// ("MAJ:MIN N" per rule). It is what limits.Lift needs as the previous
// value when the group's limits were written by an earlier agent.
func (g *Group) Throttles() (*specs.LinuxBlockIO, error) { return g.h.Throttles(g.rel) }

// Throttles is Group.Throttles of the cgroup at rel, read without loading
// it (no stat of each hierarchy's directory): nil when rel does not exist.
func (h *Hierarchy) Throttles(rel string) (*specs.LinuxBlockIO, error) {
	rel, err := cleanRel(rel)
	if err != nil {
		return nil, fmt.Errorf("read the io throttles of cgroup %q: %w", rel, err)
	}
	var b specs.LinuxBlockIO
	lists := map[string]*[]specs.LinuxThrottleDevice{
		"rbps": &b.ThrottleReadBpsDevice, "wbps": &b.ThrottleWriteBpsDevice,
		"riops": &b.ThrottleReadIOPSDevice, "wiops": &b.ThrottleWriteIOPSDevice,
	}
	add := func(key, dev, rate string) error {
		var t specs.LinuxThrottleDevice
		if _, err := fmt.Sscanf(dev, "%d:%d", &t.Major, &t.Minor); err != nil {
			return fmt.Errorf("parse device %q: %w", dev, err)
		}
		n, err := strconv.ParseUint(rate, 10, 64)
		if err != nil {
			return fmt.Errorf("parse rate %q of %s: %w", rate, dev, err)
		}
		t.Rate = n
		*lists[key] = append(*lists[key], t)
		return nil
	}
	found := false
	if h.Mode() == Unified {
		f := filepath.Join(h.unifiedDir(rel), "io.max")
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			fields := strings.Fields(line)
			for _, kv := range fields[min(1, len(fields)):] {
				k, v, _ := strings.Cut(kv, "=")
				if _, ok := lists[k]; !ok || v == "max" {
					continue
				}
				if err := add(k, fields[0], v); err != nil {
					return nil, fmt.Errorf("%s: %w", f, err)
				}
				found = true
			}
		}
	} else if dir := h.v1Dir(cgroup1.Blkio, rel); dir != "" {
		for key, name := range map[string]string{"rbps": "read_bps", "wbps": "write_bps", "riops": "read_iops", "wiops": "write_iops"} {
			f := filepath.Join(dir, "blkio.throttle."+name+"_device")
			data, err := os.ReadFile(f)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				if fields := strings.Fields(line); len(fields) == 2 {
					if err := add(key, fields[0], fields[1]); err != nil {
						return nil, fmt.Errorf("%s: %w", f, err)
					}
					found = true
				}
			}
		}
	}
	if !found {
		return nil, nil
	}
	return &b, nil
}
