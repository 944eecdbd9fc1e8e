package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// lockDir holds the agents' cgroup-root locks (FHS /run/lock).
const lockDir = "/run/lock/berth"

// heldLock is a lock file this process holds.
type heldLock struct {
	path string
	f    *os.File
}

// release removes the lock file and then closes it (which ends the lock):
// an agent that stops cleanly leaves no file behind. Removing it while
// still holding the lock is safe with lockFile's check that the path
// still names the file it locked: a process that opened the old file
// meanwhile gets its lock but sees the path gone, and tries again.
func (l *heldLock) release() {
	_ = os.Remove(l.path)
	_ = l.f.Close()
}

// lockFile takes an exclusive, non-blocking flock(2) on path (created if
// missing), writes this process's PID into it (then note, on a line of
// its own, when set) and returns it held; the
// lock ends when the file is closed or the process dies, so a killed agent
// never leaves a stale lock (only a stale file, which the next agent
// takes over). It returns an error naming what holds the lock when another
// process has it.
func lockFile(path, what, note string) (*heldLock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", what, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			holder, _ := os.ReadFile(path)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				pid, rest, _ := strings.Cut(strings.TrimSpace(string(holder)), "\n")
				if rest != "" {
					pid += ", " + strings.TrimSpace(rest)
				}
				return nil, fmt.Errorf("another berth agent (pid %s) already uses %s (lock %s): refusing to start, nothing was touched",
					pid, what, path)
			}
			return nil, fmt.Errorf("lock %s (%s): %w", what, path, err)
		}
		// The previous holder may have removed the file between our open
		// and our lock: then we hold a lock nobody else can see.
		held, err1 := f.Stat()
		named, err2 := os.Stat(path)
		if err1 != nil || err2 != nil || !os.SameFile(held, named) {
			f.Close()
			continue
		}
		_ = f.Truncate(0)
		_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
		if note != "" {
			_, _ = fmt.Fprintf(f, "%s\n", note)
		}
		return &heldLock{path: path, f: f}, nil
	}
}

// LockFile is the lock file of the agent that uses dataDir: while that
// agent runs it holds an exclusive flock(2) on it, and the file holds the
// agent's PID and a newline (`berth reload` reads it to signal the agent).
// The agent removes it when it stops cleanly.
func LockFile(dataDir string) string { return filepath.Join(dataDir, "agent.lock") }

// lockAgent makes sure no other agent on this host uses the same data_dir
// (its embedded etcd) or the same cgroup root (whose leftovers an agent
// kills at start-up), before the agent touches either.
func lockAgent(dataDir, cgroupRoot string) (release func(), err error) {
	d, err := lockFile(LockFile(dataDir), "data_dir "+dataDir, "")
	if err != nil {
		return nil, err
	}
	name := strings.Trim(strings.ReplaceAll(filepath.Clean("/"+cgroupRoot), "/", "-"), "-")
	if cgroupRoot == "" {
		name = "self-" + ownCgroupName()
	}
	// The cgroup root's lock names the data_dir of its agent: a second
	// agent on the root is told which one holds it (one agent per
	// cgroup_root, docs/live-restart.md).
	c, err := lockFile(filepath.Join(lockDir, "cgroup-"+name+".lock"), fmt.Sprintf("cgroup_root %q", cgroupRoot), "data_dir "+dataDir)
	if err != nil {
		d.release()
		return nil, fmt.Errorf("%w; one agent per cgroup_root: give this agent (data_dir %s) a cgroup_root of its own, or stop that agent first", err, dataDir)
	}
	return func() { c.release(); d.release() }, nil
}

// ownCgroupName names this process's cgroup (the delegated root) for a lock
// file: the cgroup2 path, or the first v1 line's.
func ownCgroupName() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "unknown"
	}
	var first string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		p := strings.TrimSuffix(parts[2], "/agent")
		if parts[0] == "0" {
			first = p
			break
		}
		if first == "" {
			first = p
		}
	}
	return strings.Trim(strings.ReplaceAll(first, "/", "-"), "-")
}
