package worker

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

// A descriptor the process holds without close-on-exec (as one inherited
// from a wrapper's `exec 7>>FILE`) is reported and sealed by
// SealInheritedDescriptors, and a job started afterwards holds fds 0, 1
// and 2 only.
func TestSealedDescriptorsDoNotReachJobs(t *testing.T) {
	g := newTestGroup(t, 0)
	file := filepath.Join(t.TempDir(), "secret")
	fd, err := unix.Open(file, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND, 0o600) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	sealed, err := SealInheritedDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sealed, InheritedDescriptor{FD: fd, Target: file}) {
		t.Errorf("sealed %+v, want fd %d (%s) among them", sealed, fd, file)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("fd %d flags %#x (%v), want FD_CLOEXEC", fd, flags, err)
	}
	if again, err := SealInheritedDescriptors(); err != nil || len(again) != 0 {
		t.Errorf("second call: %+v, %v; want nothing left to seal", again, err)
	}

	w := startWorker(t, sh(g, `exec sleep 1000`))
	pid := waitRunning(t, w)
	// Running comes before the program is loaded: the dynamic loader of
	// sleep holds the libraries it maps open for a moment (fd 3 was
	// libc.so.6). Read once sleep itself sleeps, the loader long done.
	testutil.Eventually(t, 20*time.Second, "the job in sleep's own nanosleep", func() bool { return inNanosleep(pid) })
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Errorf("job holds descriptors %v, want [0 1 2]", got)
	}
}

// Where close_range cannot be used (before Linux 5.11, or refused by a
// seccomp filter), each descriptor /proc/self/fd lists is sealed on its
// own.
func TestSealEachDescriptor(t *testing.T) {
	fd, err := unix.Open(filepath.Join(t.TempDir(), "f"), unix.O_WRONLY|unix.O_CREAT, 0o600) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	open, err := inheritable()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(open, func(d InheritedDescriptor) bool { return d.FD == fd }) {
		t.Fatalf("inheritable() = %+v, want fd %d listed", open, fd)
	}
	if err := sealEach(open); err != nil {
		t.Fatal(err)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd %d flags %#x (%v), want FD_CLOEXEC", fd, flags, err)
	}
	if left, err := inheritable(); err != nil || len(left) != 0 {
		t.Errorf("after sealEach: %+v, %v; want nothing left", left, err)
	}
}

// inNanosleep reports whether process pid is blocked in nanosleep(2) or
// clock_nanosleep(2) (/proc/PID/syscall, proc(5): the number of the
// syscall it is blocked in): sleep(1)'s own code runs, past the shell
// that exec'd it and any dynamic loader (whichever sleep the host has:
// coreutils', or busybox's on the cgroup v2 lane).
func inNanosleep(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/syscall")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return false
	}
	n, err := strconv.Atoi(f[0])
	return err == nil && (n == unix.SYS_CLOCK_NANOSLEEP || n == unix.SYS_NANOSLEEP)
}
