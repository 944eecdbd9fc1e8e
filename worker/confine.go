package worker

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// confineThread takes from the calling OS thread, and from every process
// it forks from then on, the means to gain a privilege:
//
//   - no_new_privs (prctl(2) PR_SET_NO_NEW_PRIVS;
//     Documentation/userspace-api/no_new_privs.rst): execve honours no
//     set-user-ID or set-group-ID bit and no file capability;
//   - an empty capability bounding set (PR_CAPBSET_DROP of every capability
//     up to /proc/sys/kernel/cap_last_cap; capabilities(7)): no execve can
//     give the process a capability again.
//
// Both are attributes of a thread, inherited across fork and kept across
// execve, and neither can be undone: the caller must be a goroutine locked
// to its thread for good (a launcher). No other thread of the agent is
// touched: the Go runtime never clones a thread from a locked one (it asks
// its template thread, which runtime.LockOSThread starts before the
// launcher confines itself). The thread keeps its effective
// capabilities, which a child needs to switch to a job's user (setgroups,
// setgid, setuid); once it has switched, the kernel empties its permitted
// and effective sets, and the job runs with none and can gain none. It
// needs CAP_SETPCAP (berth.service keeps it for this); it returns the
// prctl error otherwise.
func confineThread() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("confine launcher thread: prctl PR_SET_NO_NEW_PRIVS: %w", err)
	}
	last, err := capLastCap()
	if err != nil {
		return fmt.Errorf("confine launcher thread: %w", err)
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("confine launcher thread: prctl PR_CAPBSET_DROP %d (needs CAP_SETPCAP): %w", c, err)
		}
	}
	return nil
}

// capLastCap is the highest capability number the running kernel knows
// (/proc/sys/kernel/cap_last_cap, capabilities(7)).
func capLastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read the kernel's last capability: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > 63 {
		return 0, fmt.Errorf("/proc/sys/kernel/cap_last_cap holds %q, not a capability number", strings.TrimSpace(string(b)))
	}
	return n, nil
}
