package limits

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sysDevBlock holds one entry per block device, named "MAJ:MIN"
// (Documentation/ABI/stable/sysfs-dev).
const sysDevBlock = "/sys/dev/block"

// Device is the whole block device an I/O limit applies to.
type Device struct {
	// Major and Minor are the device numbers of the whole disk, as the
	// blkio throttle files and io.max take them.
	Major, Minor uint32
	// Path is the path that was resolved, as given.
	Path string
	// Note says how Path was mapped to the disk when it was not the disk
	// itself ("partition /dev/vda1 (254:1) resolved to disk vda (254:0)");
	// "" otherwise. Callers log it.
	Note string
}

// String formats d as "MAJ:MIN".
func (d Device) String() string { return fmt.Sprintf("%d:%d", d.Major, d.Minor) }

// ResolveDevice returns the whole block device whose I/O a limit on path
// throttles.
//
//   - A block device node gives its own major:minor.
//   - A partition gives the whole disk it belongs to (the kernel throttles
//     whole disks only): /sys/dev/block/MAJ:MIN/partition exists for a
//     partition and the parent directory's "dev" file holds the disk's
//     MAJ:MIN. Note says so.
//   - Any other path gives the block device behind its file system
//     (stat's st_dev), then the same partition rule, as systemd's
//     IOReadBandwidthMax= does (systemd.resource-control(5)).
//     Device-mapper and loop devices are disks themselves.
//
// It returns an error when path does not exist, when it is a character
// device or other non-block special file, and when its file system has no
// block device behind it (tmpfs, overlay, proc...: st_dev has no entry in
// /sys/dev/block).
func ResolveDevice(path string) (Device, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Device{}, fmt.Errorf("resolve device %s: %w", path, err)
	}
	dev := Device{Path: path}
	var rdev uint64
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		rdev = st.Rdev
	case unix.S_IFCHR, unix.S_IFIFO, unix.S_IFSOCK:
		return Device{}, fmt.Errorf("resolve device %s: not a block device nor a path on a file system", path)
	default:
		rdev = st.Dev
	}
	maj, min := unix.Major(rdev), unix.Minor(rdev)
	entry := filepath.Join(sysDevBlock, fmt.Sprintf("%d:%d", maj, min))
	if _, err := os.Stat(entry); err != nil {
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			return Device{}, fmt.Errorf("resolve device %s: block device %d:%d has no %s entry: %w", path, maj, min, entry, err)
		}
		return Device{}, fmt.Errorf("resolve device %s: its file system (device %d:%d) has no block device behind it", path, maj, min)
	}
	dev.Major, dev.Minor = maj, min
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		dev.Note = fmt.Sprintf("path %s is on block device %s (%d:%d)", path, blockName(entry), maj, min)
	}
	if _, err := os.Stat(filepath.Join(entry, "partition")); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return dev, nil
		}
		return Device{}, fmt.Errorf("resolve device %s: %w", path, err)
	}
	// A partition: its sysfs directory sits inside the disk's.
	diskDir, err := filepath.EvalSymlinks(entry)
	if err != nil {
		return Device{}, fmt.Errorf("resolve device %s: %w", path, err)
	}
	diskDir = filepath.Dir(diskDir)
	b, err := os.ReadFile(filepath.Join(diskDir, "dev"))
	if err != nil {
		return Device{}, fmt.Errorf("resolve device %s: disk of partition %d:%d: %w", path, maj, min, err)
	}
	dmaj, dmin, err := parseMajMin(strings.TrimSpace(string(b)))
	if err != nil {
		return Device{}, fmt.Errorf("resolve device %s: disk of partition %d:%d: %w", path, maj, min, err)
	}
	part := fmt.Sprintf("partition %s (%d:%d)", blockName(entry), maj, min)
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		part = fmt.Sprintf("path %s is on %s, which", path, part)
	} else {
		part = fmt.Sprintf("partition %s (%d:%d)", path, maj, min)
	}
	dev.Major, dev.Minor = dmaj, dmin
	dev.Note = fmt.Sprintf("%s resolved to disk %s (%d:%d)", part, filepath.Base(diskDir), dmaj, dmin)
	return dev, nil
}

// blockName is the kernel name of the block device at a /sys/dev/block
// entry ("vda1"), or the entry itself when it cannot be read.
func blockName(entry string) string {
	if p, err := filepath.EvalSymlinks(entry); err == nil {
		return filepath.Base(p)
	}
	return entry
}

func parseMajMin(s string) (uint32, uint32, error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not MAJ:MIN", s)
	}
	maj, err1 := strconv.ParseUint(a, 10, 32)
	min, err2 := strconv.ParseUint(b, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q is not MAJ:MIN", s)
	}
	return uint32(maj), uint32(min), nil
}
