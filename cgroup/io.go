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
	"fmt"
	"path/filepath"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup2"
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
