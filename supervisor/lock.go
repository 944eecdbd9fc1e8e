package supervisor

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

// lockFile takes an exclusive, non-blocking flock(2) on path (created if
// missing) and returns the open file that holds it; the lock ends when the
// file is closed or the process dies, so a killed agent never leaves a
// stale lock. It returns an error naming what holds the lock when another
// process has it.
func lockFile(path, what string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another berth agent (pid %s) already uses %s (lock %s): refusing to start, nothing was touched",
				strings.TrimSpace(string(holder)), what, path)
		}
		return nil, fmt.Errorf("lock %s (%s): %w", what, path, err)
	}
	_ = f.Truncate(0)
	_, _ = fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}

// lockAgent makes sure no other agent on this host uses the same data_dir
// (its embedded etcd) or the same cgroup root (whose leftovers an agent
// kills at start-up), before the agent touches either.
func lockAgent(dataDir, cgroupRoot string) (release func(), err error) {
	d, err := lockFile(filepath.Join(dataDir, "agent.lock"), "data_dir "+dataDir)
	if err != nil {
		return nil, err
	}
	name := strings.Trim(strings.ReplaceAll(filepath.Clean("/"+cgroupRoot), "/", "-"), "-")
	if cgroupRoot == "" {
		name = "self-" + ownCgroupName()
	}
	c, err := lockFile(filepath.Join(lockDir, "cgroup-"+name+".lock"), fmt.Sprintf("cgroup_root %q", cgroupRoot))
	if err != nil {
		d.Close()
		return nil, err
	}
	return func() { c.Close(); d.Close() }, nil
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
