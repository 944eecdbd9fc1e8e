package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// CgroupMount is where the host mounts its cgroup file systems.
const CgroupMount = "/sys/fs/cgroup"

// AgentLockDir is where an agent keeps the lock file of its cgroup root,
// cgroup-<root with "/" as "-">.lock (supervisor's lockDir, FHS /run/lock).
const AgentLockDir = "/run/lock/berth"

// roots is every cgroup root this test binary's tests registered with
// TrackCgroupRoot: the names LeftBehind checks.
var roots struct {
	mu    sync.Mutex
	names []string
}

// TrackCgroupRoot records root (a cgroup path relative to each hierarchy's
// mount, unique to one test) as made by this test binary and returns it: at
// the end of the test RemoveCgroupRoot removes it. Cleanups run last in,
// first out: call it before registering the cleanup that stops what uses
// root (an agent), so that it runs after that one.
func TrackCgroupRoot(t interface{ Cleanup(func()) }, root string) string {
	roots.mu.Lock()
	roots.names = append(roots.names, root)
	roots.mu.Unlock()
	t.Cleanup(func() { RemoveCgroupRoot(root) })
	return root
}

// Hierarchies lists the mount point of every cgroup hierarchy on the host:
// each v1 controller's (and named hierarchy's) directory under
// /sys/fs/cgroup and the cgroup2 mount (/sys/fs/cgroup/unified on a hybrid
// host, /sys/fs/cgroup itself on a pure v2 one), symlinks resolved, each
// once.
func Hierarchies() []string {
	if _, err := os.Stat(filepath.Join(CgroupMount, "cgroup.controllers")); err == nil {
		return []string{CgroupMount}
	}
	seen := map[string]bool{}
	var out []string
	entries, _ := os.ReadDir(CgroupMount)
	for _, e := range entries {
		p, err := filepath.EvalSymlinks(filepath.Join(CgroupMount, e.Name()))
		if err != nil || seen[p] {
			continue
		}
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err != nil {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// CgroupLockFile is the lock file an agent with cgroup_root root holds.
func CgroupLockFile(root string) string {
	name := strings.Trim(strings.ReplaceAll(filepath.Clean("/"+root), "/", "-"), "-")
	return filepath.Join(AgentLockDir, "cgroup-"+name+".lock")
}

// RemoveCgroupRoot kills every process at or below root in every hierarchy
// (processes the test started there), removes the directories deepest
// first (retrying for up to 10 s while the kernel still counts an exiting
// process) and removes root's agent lock file. It touches only root, a name
// the caller made unique to its test.
func RemoveCgroupRoot(root string) {
	if root == "" || filepath.Clean("/"+root) == "/" {
		return
	}
	for _, h := range Hierarchies() {
		dir := filepath.Join(h, root)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		Poll(10*time.Second, func() bool {
			pids := ProcsUnder(dir)
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			return len(pids) == 0
		})
		Poll(10*time.Second, func() bool {
			var dirs []string
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				_ = syscall.Rmdir(dirs[i])
			}
			_, err := os.Stat(dir)
			return os.IsNotExist(err)
		})
	}
	_ = os.Remove(CgroupLockFile(root))
}

// ProcsUnder is every PID listed in a cgroup.procs at or below dir.
func ProcsUnder(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return nil
	})
	return pids
}

// LeftBehind returns an error listing each cgroup directory (in any
// hierarchy) and agent lock file of a root registered with TrackCgroupRoot
// that still exists, or nil. A TestMain calls it after m.Run: a test that
// leaks what it made fails the package.
func LeftBehind() error {
	roots.mu.Lock()
	names := append([]string(nil), roots.names...)
	roots.mu.Unlock()
	var left []string
	for _, root := range names {
		for _, h := range Hierarchies() {
			if d := filepath.Join(h, root); exists(d) {
				left = append(left, d)
			}
		}
		if f := CgroupLockFile(root); exists(f) {
			left = append(left, f)
		}
	}
	if len(left) == 0 {
		return nil
	}
	return fmt.Errorf("tests left %d cgroup directories or lock files behind:\n  %s", len(left), strings.Join(left, "\n  "))
}

// CheckLeftBehind runs after m.Run in a TestMain: it prints LeftBehind's
// error and turns a passing exit code into a failing one.
func CheckLeftBehind(code int) int {
	if err := LeftBehind(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
