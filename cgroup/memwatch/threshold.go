package memwatch

// The v1 usage threshold: Documentation/admin-guide/cgroup-v1/memory.rst,
// "Memory thresholds" and cgroups.rst "Notification API". An eventfd(2)
// is registered by writing "<event_fd> <fd of memory.usage_in_bytes>
// <threshold>" to the cgroup's cgroup.event_control; the kernel then
// signals the eventfd whenever the usage crosses the threshold, upwards or
// downwards, and once more when the cgroup is removed. The kernel keeps
// the eventfd and the cgroup, not the usage file's descriptor, which is
// closed once registered; closing the eventfd unregisters the threshold.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/berthd/berth/internal/kernfile"
	"golang.org/x/sys/unix"
)

// thrState is a threshold watch's files and the side of the threshold the
// usage was last seen on.
type thrState struct {
	dir, usageFile string
	// ino is the cgroup directory's inode at Watch: a cgroup made again
	// under the same name (a job started anew) is another one.
	ino uint64
	// high is Rule.High rounded down to a page, as the kernel compares it.
	high  uint64
	above bool
}

// registerThreshold registers h's eventfd in its cgroup's
// cgroup.event_control and reports the usage then and whether it is at or
// above the threshold already.
func (h *Handle) registerThreshold() (above bool, usage uint64, err error) {
	if err := h.rule.checkThreshold(); err != nil {
		return false, 0, err
	}
	s := &h.thr
	s.dir = h.target.V1Dir
	s.usageFile = filepath.Join(s.dir, "memory.usage_in_bytes")
	page := uint64(unix.Getpagesize())
	s.high = uint64(h.rule.High) / page * page
	var st unix.Stat_t
	if err := unix.Stat(s.dir, &st); err != nil {
		return false, 0, &fs.PathError{Op: "stat", Path: s.dir, Err: err}
	}
	s.ino = st.Ino
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return false, 0, fmt.Errorf("eventfd: %w", err)
	}
	ufd, err := unix.Open(s.usageFile, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(efd)
		return false, 0, &fs.PathError{Op: "open", Path: s.usageFile, Err: err}
	}
	defer unix.Close(ufd)
	ctl := filepath.Join(s.dir, "cgroup.event_control")
	if err := kernfile.Write(ctl, fmt.Sprintf("%d %d %d", efd, ufd, h.rule.High)); err != nil {
		unix.Close(efd)
		return false, 0, fmt.Errorf("register threshold %d on %s in %s: %w", h.rule.High, s.usageFile, ctl, err)
	}
	// Read after registering: a crossing after this read is signalled.
	var buf [32]byte
	b, err := pread(ufd, buf[:])
	if err == nil {
		usage, err = kernfile.Uint(b)
	}
	if err != nil {
		unix.Close(efd)
		return false, 0, fmt.Errorf("read %s: %w", s.usageFile, err)
	}
	h.fd = efd
	s.above = usage >= s.high
	return s.above, usage, nil
}

// onThreshold handles one signal of h's eventfd. w.mu held.
func (h *Handle) onThreshold(now time.Time, buf []byte) {
	s := &h.thr
	var cnt [8]byte
	if _, err := unix.Read(h.fd, cnt[:]); err != nil {
		if err != unix.EAGAIN && err != unix.EINTR {
			h.w.post(h, Event{Kind: Failed, At: now, Err: fmt.Errorf("read eventfd of %s: %w", s.usageFile, err)})
		}
		return
	}
	// The counter adds up the signals since the last read: two or more
	// mean the usage went over and back (or under and back) meanwhile.
	signals := binary.NativeEndian.Uint64(cnt[:])
	var st unix.Stat_t
	if err := unix.Stat(s.dir, &st); err != nil || st.Ino != s.ino {
		if err == nil || errors.Is(err, unix.ENOENT) {
			h.w.post(h, Event{Kind: Gone, At: now})
		} else {
			h.w.post(h, Event{Kind: Failed, At: now, Err: &fs.PathError{Op: "stat", Path: s.dir, Err: err}})
		}
		return
	}
	b, err := kernfile.ReadAt(unix.AT_FDCWD, s.usageFile, buf)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
		h.w.post(h, Event{Kind: Gone, At: now})
		return
	}
	var usage uint64
	if err == nil {
		usage, err = kernfile.Uint(b)
	}
	if err != nil {
		h.w.post(h, Event{Kind: Failed, At: now, Err: fmt.Errorf("read %s: %w", s.usageFile, err)})
		return
	}
	above := usage >= s.high
	if above == s.above && signals >= 2 {
		h.w.post(h, Event{Kind: side(!above), At: now, Usage: usage})
	}
	if above != s.above || signals >= 2 {
		h.w.post(h, Event{Kind: side(above), At: now, Usage: usage})
	}
	s.above = above
}

// side is Over above the threshold, Under below.
func side(above bool) Kind {
	if above {
		return Over
	}
	return Under
}
