package worker

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// A job starts with exactly three descriptors: 0 (/dev/null), 1 and 2 (its
// log pipe), as systemd, supervisord and runc start theirs. Go's
// syscall.ForkExec, which spawn uses, duplicates ProcAttr.Files onto 0, 1
// and 2 in the child and has no step that closes the rest: every other
// descriptor the agent holds reaches the job unless it is close-on-exec.
// Two rules make sure none does:
//
//   - every descriptor berth opens is O_CLOEXEC: Go's os, net and
//     syscall.Pipe2 callers set it, and berth's raw unix calls (cgroup
//     directory and control-file fds, the log pipes, the epoll instances)
//     pass O_CLOEXEC or EPOLL_CLOEXEC themselves;
//   - the descriptors the agent inherited from whoever started it (a shell's
//     `exec 7>>FILE`, `flock LOCK berth agent`'s lock) are marked
//     close-on-exec at start-up, before anything is spawned
//     (SealInheritedDescriptors).

// InheritedDescriptor is a descriptor above 2 that the process held
// without close-on-exec when SealInheritedDescriptors ran.
type InheritedDescriptor struct {
	// FD is the descriptor number.
	FD int
	// Target is what /proc/self/fd/FD links to ("/var/lock/x",
	// "pipe:[1234]"); "" when it could not be read.
	Target string
}

// SealInheritedDescriptors marks every descriptor above 2 of the calling
// process close-on-exec, so that no descriptor the process inherited
// reaches a program it starts (a job). It uses close_range(2) with
// CLOSE_RANGE_CLOEXEC (Linux 5.11) and, on an older kernel, sets FD_CLOEXEC
// on each descriptor /proc/self/fd lists. It closes nothing: the process
// keeps using what it inherited (a socket-activation listener, say).
// Call it once at start-up, before any job is spawned; calling it again
// is harmless.
//
// It returns the descriptors that lacked close-on-exec before the call, as
// /proc/self/fd listed them (nil when /proc is not mounted), so the caller
// can log them.
//
// Errors: close_range fails (missing, refused) and /proc/self/fd cannot
// be read, or a descriptor's flags cannot be set.
func SealInheritedDescriptors() ([]InheritedDescriptor, error) {
	open, listErr := inheritable()
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return open, nil
	}
	// Before Linux 5.11 (EINVAL: the flag is unknown) or 5.9 (ENOSYS), or
	// refused by a seccomp filter that predates close_range (EPERM): one
	// descriptor at a time.
	if listErr != nil {
		return nil, fmt.Errorf("mark inherited descriptors close-on-exec: close_range: %w; %w", err, listErr)
	}
	return open, sealEach(open)
}

// sealEach sets FD_CLOEXEC on each of ds; one closed meanwhile is skipped.
func sealEach(ds []InheritedDescriptor) error {
	for _, d := range ds {
		if _, err := unix.FcntlInt(uintptr(d.FD), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("mark descriptor %d (%s) close-on-exec: %w", d.FD, d.Target, err)
		}
	}
	return nil
}

// inheritable lists the descriptors above 2 without FD_CLOEXEC, from
// /proc/self/fd, sorted.
func inheritable() ([]InheritedDescriptor, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("list open descriptors: %w", err)
	}
	var out []InheritedDescriptor
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // closed since listed (ReadDir's own fd), or already sealed
		}
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, InheritedDescriptor{FD: fd, Target: target})
	}
	slices.SortFunc(out, func(a, b InheritedDescriptor) int { return a.FD - b.FD })
	return out, nil
}
