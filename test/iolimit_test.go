package test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

// C7 (moby#10004): an I/O limit on a partition of a loop device with a
// partition table is applied to the whole loop disk's major:minor (cgroup
// I/O throttling applies to whole disks; blk-throttle keys its rules by the
// request queue's disk), the agent logs a note saying so, and the kernel
// enforces it: O_DIRECT writes to the partition run at no more than the
// disk's write_bps.
func TestC7IOLimitOnPartitionAppliesToDisk(t *testing.T) {
	testutil.NeedRoot(t)
	// The loop device is made before the env so that its cleanup (detach)
	// runs after the env's (kill the job that holds the partition open).
	disk, part := loopWithPartition(t, 64<<20)
	dmaj, dmin := blockDev(t, disk)
	pmaj, pmin := blockDev(t, part)
	if dmaj == pmaj && dmin == pmin {
		t.Fatalf("partition %s has the disk's number %d:%d", part, dmaj, dmin)
	}
	diskKey := fmt.Sprintf("%d:%d", dmaj, dmin)

	const limit = 2 << 20 // write_bps = "2MiB", bytes/s
	e := newEnv(t)
	e.write(e.header("2s") + fmt.Sprintf(`
[static]
connectors = ["ddwriter"]

[[connector]]
name = "ddwriter"
  [connector.run]
  command = ["/bin/sh", "-c", "while :; do dd if=/dev/zero of=%s bs=64k count=256 oflag=direct 2>/dev/null || exit 1; done"]
  limits = { io = [{ device = %q, write_bps = "2MiB" }] }
`, part, part))
	e.start()
	e.waitRunning("ddwriter")

	// (1) The throttle names the disk, not the partition.
	unified := false
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		unified = true
	}
	var dir, limitFile string
	if unified {
		dir = filepath.Join("/sys/fs/cgroup", e.root, "jobs", "ddwriter")
		limitFile = "io.max"
	} else {
		dir = filepath.Join("/sys/fs/cgroup/blkio", e.root, "jobs", "ddwriter")
		limitFile = "blkio.throttle.write_bps_device"
	}
	b, err := os.ReadFile(filepath.Join(dir, limitFile))
	if err != nil {
		t.Fatalf("read the job's %s: %v", limitFile, err)
	}
	got := strings.TrimSpace(string(b))
	want := diskKey + " " + strconv.Itoa(limit)
	if unified {
		want = diskKey + " rbps=max wbps=" + strconv.Itoa(limit) + " riops=max wiops=max"
	}
	if got != want {
		t.Errorf("%s = %q, want %q (the disk %s, not the partition %d:%d)", limitFile, got, want, disk, pmaj, pmin)
	}

	// (3) Enforcement, measured by the kernel's own per-device accounting
	// of the job's cgroup: first wait until the job is writing, then take
	// the rate over at least 3 s between two reads of the counter.
	written := func() int64 { return cgroupWriteBytes(t, dir, unified, diskKey) }
	procWritten := func() float64 {
		v, _ := metric(e.metrics(), "berth_job_write_bytes_total", `job_id="ddwriter"`)
		return v
	}
	testutil.Eventually(t, 10*time.Second, "the job's first writes to "+disk, func() bool { return written() > 0 })
	w0, p0, t0 := written(), procWritten(), time.Now()
	testutil.Eventually(t, 10*time.Second, "3 s of accounting", func() bool { return time.Since(t0) >= 3*time.Second })
	w1, p1, t1 := written(), procWritten(), time.Now()
	secs := t1.Sub(t0).Seconds()
	rate := float64(w1-w0) / secs
	procRate := (p1 - p0) / secs
	t.Logf("write rate to %s over %.2f s: %.0f B/s from the cgroup, %.0f B/s from berth_job_write_bytes_total (limit %d B/s)", disk, secs, rate, procRate, limit)
	if rate > limit*1.1 {
		t.Errorf("the job wrote %.0f B/s to %s, limit %d B/s: the throttle is not enforced", rate, disk, limit)
	}
	if rate <= 0 {
		t.Errorf("the job wrote nothing to %s in %.2f s", disk, secs)
	}
	// The same bound seen through /proc/PID/io write_bytes, which the
	// agent reports per job.
	if procRate > limit*1.1 || procRate <= 0 {
		t.Errorf("berth_job_write_bytes_total grew %.0f B/s, want in (0, %d]", procRate, limit*11/10)
	}

	// (2) The log note. The agent's output is read once it has exited, so
	// the buffer is no longer written to.
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("agent exit after SIGTERM: %v", err)
	}
	note := fmt.Sprintf("partition %s (%d:%d) resolved to disk %s (%s)", part, pmaj, pmin, filepath.Base(disk), diskKey)
	if !strings.Contains(e.out.String(), note) {
		t.Errorf("agent log has no note %q:\n%s", note, e.out)
	}
}

// blockDev returns the major and minor number of the block device node path.
func blockDev(t *testing.T, path string) (uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		t.Fatalf("%s is not a block device", path)
	}
	return unix.Major(st.Rdev), unix.Minor(st.Rdev)
}

// cgroupWriteBytes reads the bytes written to the device key ("MAJ:MIN")
// by the cgroup at dir: v1 blkio.throttle.io_service_bytes_recursive
// ("7:8 Write N", Documentation/admin-guide/cgroup-v1/blkio-controller.rst)
// or v2 io.stat ("7:8 rbytes=.. wbytes=N ..", cgroup-v2.rst). A device the
// cgroup has not done I/O on yet counts 0.
func cgroupWriteBytes(t *testing.T, dir string, unified bool, key string) int64 {
	t.Helper()
	name := "blkio.throttle.io_service_bytes_recursive"
	if unified {
		name = "io.stat"
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != key {
			continue
		}
		if !unified {
			if len(f) == 3 && f[1] == "Write" {
				n, err := strconv.ParseInt(f[2], 10, 64)
				if err != nil {
					t.Fatalf("%s: bad line %q", name, line)
				}
				return n
			}
			continue
		}
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "wbytes="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: bad line %q", name, line)
				}
				return n
			}
		}
	}
	return 0
}

// loopWithPartition attaches a sparse file of size bytes holding an MBR
// with one Linux partition (sector 2048 to the end) to a free loop device
// with partition scanning, as `losetup -P` does. A kernel without
// CONFIG_MSDOS_PARTITION does not read the table, so the partition is then
// added with BLKPG_ADD_PARTITION, as `partx --add` does. It returns the
// disk's and the partition's device nodes. Cleanup removes the partition
// and detaches the device. Skips when the host has no loop devices.
func loopWithPartition(t *testing.T, size int64) (disk, part string) {
	t.Helper()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no loop device support: %v", err)
	}
	defer ctl.Close()
	backing, err := os.Create(filepath.Join(t.TempDir(), "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backing.Close() })
	if err := backing.Truncate(size); err != nil {
		t.Fatal(err)
	}
	var mbr [512]byte
	pe := mbr[446:462]
	pe[4] = 0x83 // Linux
	binary.LittleEndian.PutUint32(pe[8:], 2048)
	binary.LittleEndian.PutUint32(pe[12:], uint32(size/512-2048))
	mbr[510], mbr[511] = 0x55, 0xAA
	if _, err := backing.WriteAt(mbr[:], 0); err != nil {
		t.Fatal(err)
	}

	var loop *os.File
	var n int
	for attempt := 0; ; attempt++ {
		n, err = unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			t.Fatalf("LOOP_CTL_GET_FREE: %v", err)
		}
		loop, err = os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("open /dev/loop%d: %v", n, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_PARTSCAN}}
		if err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg); err == nil {
			break
		}
		loop.Close()
		// Another program took the device between GET_FREE and CONFIGURE.
		if !errors.Is(err, unix.EBUSY) || attempt == 10 {
			t.Fatalf("LOOP_CONFIGURE /dev/loop%d: %v", n, err)
		}
	}
	disk = fmt.Sprintf("/dev/loop%d", n)
	name := fmt.Sprintf("loop%dp1", n)
	sysDev := filepath.Join("/sys/block", filepath.Base(disk), name, "dev")
	blkpg := func(op int32) error {
		p := unix.BlkpgPartition{Start: 2048 * 512, Length: size - 2048*512, Pno: 1}
		arg := unix.BlkpgIoctlArg{Op: op, Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, loop.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); errno != 0 {
			return errno
		}
		return nil
	}
	t.Cleanup(func() {
		// The job holding the partition open was killed by the env's
		// cleanup, which runs first; its last bios may still be in flight.
		deadline := time.Now().Add(testutil.Deadline(5 * time.Second))
		err := blkpg(unix.BLKPG_DEL_PARTITION)
		for errors.Is(err, unix.EBUSY) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			err = blkpg(unix.BLKPG_DEL_PARTITION)
		}
		// ENXIO: the partition is already gone.
		if err != nil && !errors.Is(err, unix.ENXIO) {
			t.Errorf("BLKPG_DEL_PARTITION %s: %v", name, err)
		}
		if err := unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_CLR_FD, 0); err != nil {
			t.Errorf("LOOP_CLR_FD %s: %v", disk, err)
		}
		loop.Close()
	})

	exists := func(p string) func() bool {
		return func() bool { _, err := os.Stat(p); return err == nil }
	}
	if !poll(time.Second, exists(sysDev)) {
		if err := blkpg(unix.BLKPG_ADD_PARTITION); err != nil {
			t.Fatalf("BLKPG_ADD_PARTITION on %s: %v", disk, err)
		}
		testutil.Eventually(t, 5*time.Second, "partition "+name+" in sysfs", exists(sysDev))
	}
	part = "/dev/" + name
	if !poll(2*time.Second, exists(part)) {
		// No devtmpfs/udev node: make one from the number sysfs gives.
		b, err := os.ReadFile(sysDev)
		if err != nil {
			t.Fatal(err)
		}
		var maj, min uint32
		if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &maj, &min); err != nil {
			t.Fatalf("%s: %q: %v", sysDev, b, err)
		}
		part = filepath.Join(t.TempDir(), name)
		if err := unix.Mknod(part, unix.S_IFBLK|0o600, int(unix.Mkdev(maj, min))); err != nil {
			t.Fatalf("mknod %s: %v", part, err)
		}
	}
	return disk, part
}

// poll is eventually without failing: it reports whether cond held within
// timeout, checking every 10 ms.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(testutil.Deadline(timeout))
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
