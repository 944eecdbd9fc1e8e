package limits

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/berthd/berth/internal/testutil"

	"golang.org/x/sys/unix"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skip: needs root (block devices, loop devices)")
	}
}

func rdev(t *testing.T, path string) (uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return unix.Major(st.Rdev), unix.Minor(st.Rdev)
}

func TestResolveDeviceRootDisk(t *testing.T) {
	requireRoot(t)
	disk := testutil.RootDisk(t)
	maj, min := rdev(t, disk)
	d, err := ResolveDevice(disk)
	if err != nil || d.Major != maj || d.Minor != min || d.Note != "" || d.Path != disk {
		t.Fatalf("ResolveDevice(%s) = %+v, %v; want %d:%d without a note", disk, d, err, maj, min)
	}
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		t.Fatal(err)
	}
	root, err := ResolveDevice("/")
	if err != nil {
		t.Fatalf("ResolveDevice(/): %v", err)
	}
	if _, err := os.Stat(fmt.Sprintf("/sys/dev/block/%s/partition", root)); err == nil {
		t.Errorf("ResolveDevice(/) = %s, a partition, want a whole disk", root)
	}
	if unix.Major(st.Dev) == maj && unix.Minor(st.Dev) == min {
		// "/" is directly on the disk (vda, 254:0 here).
		if root.Major != maj || root.Minor != min || !strings.Contains(root.Note, "path / is on block device") {
			t.Errorf("ResolveDevice(/) = %+v, want %d:%d with a note", root, maj, min)
		}
	}
}

func TestResolveDeviceErrors(t *testing.T) {
	for _, p := range []string{"/proc/self", "/sys", "/dev/null", "/nonexistent-berth-device"} {
		if _, err := ResolveDevice(p); err == nil || !strings.Contains(err.Error(), "resolve device "+p+":") {
			t.Errorf("ResolveDevice(%s) error = %v, want one naming the path", p, err)
		}
	}
	var fs unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &fs); err == nil && fs.Type == unix.TMPFS_MAGIC {
		_, err := ResolveDevice("/dev/shm")
		if err == nil || !strings.Contains(err.Error(), "has no block device behind it") {
			t.Errorf("ResolveDevice(/dev/shm on tmpfs) error = %v", err)
		}
	}
}

// writeMBR writes a master boot record with one Linux partition from
// sector 2048 to the end of a disk of size bytes.
func writeMBR(f *os.File, size int64) error {
	var mbr [512]byte
	e := mbr[446:462]
	e[4] = 0x83 // Linux
	binary.LittleEndian.PutUint32(e[8:], 2048)
	binary.LittleEndian.PutUint32(e[12:], uint32(size/512-2048))
	mbr[510], mbr[511] = 0x55, 0xAA
	_, err := f.WriteAt(mbr[:], 0)
	return err
}

// loopWithPartition attaches a sparse file with an MBR partition table to
// a free loop device with partition scanning (as losetup -P does), adding
// the partition with BLKPG when the kernel cannot read MBR tables, and
// returns the disk and its first partition's device node. Detached in
// cleanup.
func loopWithPartition(t *testing.T) (disk, part string) {
	t.Helper()
	const size = 16 << 20
	backing, err := os.Create(filepath.Join(t.TempDir(), "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backing.Close() })
	if err := backing.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := writeMBR(backing, size); err != nil {
		t.Fatal(err)
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("skip: no loop device support: %v", err)
	}
	defer ctl.Close()
	var loop *os.File
	var n int
	for attempt := 0; ; attempt++ {
		n, err = unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			t.Fatalf("LOOP_CTL_GET_FREE: %v", err)
		}
		loop, err = os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("open loop device: %v", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_PARTSCAN}}
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if err == nil {
			break
		}
		loop.Close()
		// Another program took the device between GET_FREE and CONFIGURE.
		if !errors.Is(err, unix.EBUSY) || attempt == 10 {
			t.Fatalf("LOOP_CONFIGURE /dev/loop%d: %v", n, err)
		}
	}
	t.Cleanup(func() {
		if err := unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_CLR_FD, 0); err != nil {
			t.Errorf("LOOP_CLR_FD /dev/loop%d: %v", n, err)
		}
		loop.Close()
	})
	disk = fmt.Sprintf("/dev/loop%d", n)
	name := fmt.Sprintf("loop%dp1", n)
	sysDev := filepath.Join("/sys/block", fmt.Sprintf("loop%d", n), name, "dev")
	appeared := func() bool { _, err := os.Stat(sysDev); return err == nil }
	if !testutil.Poll(time.Second, appeared) {
		// A kernel built without CONFIG_MSDOS_PARTITION (this one) does
		// not read the table: add the partition it describes with
		// BLKPG_ADD_PARTITION, as partx --add does.
		p := unix.BlkpgPartition{Start: 2048 * 512, Length: size - 2048*512, Pno: 1}
		arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_ADD_PARTITION, Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, loop.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); errno != 0 {
			t.Fatalf("BLKPG_ADD_PARTITION on %s: %v", disk, errno)
		}
		if !testutil.Poll(5*time.Second, appeared) {
			t.Fatalf("partition %s did not appear in sysfs", name)
		}
	}
	part = "/dev/" + name
	if !testutil.Poll(2*time.Second, func() bool { _, err := os.Stat(part); return err == nil }) {
		// No devtmpfs/udev node: make one.
		b, err := os.ReadFile(sysDev)
		if err != nil {
			t.Fatal(err)
		}
		maj, min, err := parseMajMin(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		part = filepath.Join(t.TempDir(), name)
		if err := unix.Mknod(part, unix.S_IFBLK|0o600, int(unix.Mkdev(maj, min))); err != nil {
			t.Fatalf("mknod %s: %v", part, err)
		}
	}
	return disk, part
}

// TestResolvePartitionOfLoopDevice is the resolution half of failure case C7: a
// limit on a partition applies to the whole disk, with a note.
func TestResolvePartitionOfLoopDevice(t *testing.T) {
	requireRoot(t)
	disk, part := loopWithPartition(t)
	dmaj, dmin := rdev(t, disk)
	pmaj, pmin := rdev(t, part)
	d, err := ResolveDevice(part)
	if err != nil {
		t.Fatalf("ResolveDevice(%s): %v", part, err)
	}
	if d.Major != dmaj || d.Minor != dmin {
		t.Errorf("ResolveDevice(%s) = %s, want the disk %d:%d", part, d, dmaj, dmin)
	}
	want := fmt.Sprintf("partition %s (%d:%d) resolved to disk %s (%d:%d)", part, pmaj, pmin, filepath.Base(disk), dmaj, dmin)
	if d.Note != want {
		t.Errorf("note = %q, want %q", d.Note, want)
	}
	if d, err := ResolveDevice(disk); err != nil || d.Major != dmaj || d.Minor != dmin || d.Note != "" {
		t.Errorf("ResolveDevice(%s) = %+v, %v; a loop device is a disk", disk, d, err)
	}
	// Through the conversion: the throttle lands on the disk, the note is returned.
	l := Limits{IO: []IOLimit{{Device: part, WriteBPS: 1 << 20}}}
	r, notes, err := l.Resources(nil)
	if err != nil {
		t.Fatal(err)
	}
	w := r.BlockIO.ThrottleWriteBpsDevice
	if len(w) != 1 || w[0].Major != int64(dmaj) || w[0].Minor != int64(dmin) || w[0].Rate != 1<<20 || len(notes) != 1 || notes[0] != want {
		t.Errorf("blkio = %+v, notes %q", r.BlockIO, notes)
	}
}
