package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

// RunPrefix starts the name of the cgroup2 leaf that holds one run of a
// job: <group>/run-<n>. A job's limits stay on <group>; each run gets a
// new leaf below it (see ForkInside).
const RunPrefix = "run-"

// ErrThreadStranded is returned (wrapped) by ForkInside when the calling
// thread could not leave the group's v1 cgroups: neither its home nor the
// hierarchy root took it back. The thread must start nothing more.
var ErrThreadStranded = errors.New("launcher thread stranded in a job's cgroup")

// runSeq numbers run leaves, process-wide, so that two Group values of one
// cgroup never pick the same name.
var runSeq atomic.Uint64

// Home is where one launcher thread lives in the v1 hierarchies: the tasks
// file of its own cgroup in each v1 controller berth uses, held open. A
// thread moves into a group's v1 cgroups to fork a process there and then
// writes itself back into these (Documentation/admin-guide/cgroup-v1/cgroups.rst
// 2.2: "tasks" takes a thread ID, and "0" means the writing thread).
//
// A Home belongs to the OS thread that made it, which must be locked with
// runtime.LockOSThread and never unlocked: the Go runtime then never clones
// a new runtime thread from it (it asks its template thread instead), so no
// runtime thread is ever born inside a job's cgroup.
type Home struct {
	tid int
	// fds maps each v1 controller berth uses to an open tasks file of the
	// thread's own cgroup in it. Comounted controllers share one fd.
	fds map[cgroup1.Name]int
	// roots are the tasks files of the v1 hierarchy roots, by controller:
	// where the thread goes when its own cgroup is gone.
	roots map[cgroup1.Name]string
}

// ThreadHome records the calling OS thread's v1 cgroups, as
// /proc/thread-self/cgroup lists them, and opens their tasks files. It must
// be called on a thread locked with runtime.LockOSThread, and that thread
// must be the only one to use the Home. On a pure cgroup v2 host the Home
// is empty (nothing is moved there).
//
// Errors: /proc/thread-self/cgroup cannot be read; a tasks file cannot be
// opened.
func ThreadHome() (*Home, error) {
	h := &Home{tid: unix.Gettid(), fds: map[cgroup1.Name]int{}, roots: map[cgroup1.Name]string{}}
	f, err := os.Open("/proc/thread-self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read launcher thread's cgroups: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || parts[1] == "" {
			continue // the cgroup2 line "0::/path", or garbage
		}
		fd := -1
		for _, c := range strings.Split(parts[1], ",") {
			name := cgroup1.Name(c)
			if !isBerthV1(name) {
				continue
			}
			if fd < 0 {
				file := filepath.Join(mountRoot, c, parts[2], "tasks")
				fd, err = unix.Open(file, unix.O_WRONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					h.Close()
					return nil, fmt.Errorf("open launcher thread's tasks file %s: %w", file, err)
				}
			}
			h.fds[name] = fd
			h.roots[name] = filepath.Join(mountRoot, c, "tasks")
		}
	}
	if err := sc.Err(); err != nil {
		h.Close()
		return nil, fmt.Errorf("read launcher thread's cgroups: %w", err)
	}
	return h, nil
}

// Close closes the Home's tasks files.
func (h *Home) Close() {
	seen := map[int]bool{}
	for _, fd := range h.fds {
		if !seen[fd] {
			seen[fd] = true
			_ = unix.Close(fd)
		}
	}
	h.fds = nil
}

func isBerthV1(name cgroup1.Name) bool {
	for _, n := range v1Controllers {
		if n == name {
			return true
		}
	}
	return false
}

// ForkInside starts one process inside the group with fork, on the calling
// OS thread, which must be the thread that made home (ThreadHome), and
// returns what fork returns. fork receives an open fd of the cgroup2
// directory the child must be cloned into with clone3(CLONE_INTO_CGROUP)
// (syscall.SysProcAttr UseCgroupFD and CgroupFD), or -1 when there is none;
// it must return only once the child has exec'd its image or failed
// (syscall.ForkExec does). Nothing of the job runs before it is inside the
// group in every hierarchy, and nothing of berth's is left charged to the
// group afterwards.
//
// Where the child goes:
//
//   - cgroup2 (unified host, and the tracking tree of a hybrid host): into
//     a new leaf <group>/run-<n>, made for this run (Kill removes the
//     leaves of runs that have ended; a previous run's leaf still there is
//     removed here). The group's limits stay on <group> and cover the
//     leaf. A fresh leaf is taken for every run because some kernels (seen
//     on 6.18) SIGKILL every child cloned into a cgroup to whose cgroup.kill
//     "1" was once written — and Kill writes it between runs — while a
//     cgroup made after the kill starts clean; a leaf also keeps the group's
//     counters (CPU time, OOM kills) across runs, which remaking <group>
//     itself would reset.
//   - v1 controllers (legacy and hybrid hosts): the calling thread moves
//     itself alone into the group's cgroup in every v1 controller (writing
//     "0" to each tasks file: a single thread, without the process-wide
//     threadgroup lock that moving by pid takes), forks — the child
//     inherits the forking thread's cgroups — and moves back to home.
//
// While the thread is inside, it counts in pids.current of the group and of
// every berth group above it. So that a job with pids.max = 1 can start,
// pids.max of each such level with a limit is raised by one for each
// launcher thread inside, after the thread has entered, and lowered again
// before it leaves: at no moment can the job's own processes exceed their
// limit (pids.current may exceed pids.max meanwhile, which the kernel
// allows for moves: Documentation/admin-guide/cgroup-v1/pids.rst).
//
// On a hybrid host whose kernel lacks CLONE_INTO_CGROUP (before 5.7) the
// child is written into its cgroup2 leaf right after exec: the tracking
// tree then misses it for that moment, while every v1 limit and the v1
// freezer hold it from birth. A pure cgroup v2 host needs CLONE_INTO_CGROUP.
//
// Errors: home is nil or belongs to another thread; the leaf cannot be made
// or opened; the kernel refuses the thread (e.g. ENOSPC for a v1 cpuset
// with no CPUs); fork's own error, returned unwrapped. A thread that could
// not return to home is sent to the hierarchy roots; if even that fails the
// error wraps ErrThreadStranded.
func (g *Group) ForkInside(home *Home, fork func(cgroupFD int) (int, error)) (int, error) {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	h := g.h
	cgFD := -1
	leaf := ""
	if ud := h.unifiedDir(g.rel); ud != "" {
		var err error
		leaf, err = g.newRunLeaf(ud)
		if err != nil {
			return 0, err
		}
		if h.cloneInto {
			cgFD, err = openIn(h.unifiedMount, leaf, unix.O_RDONLY|unix.O_DIRECTORY)
			if err != nil {
				return 0, fmt.Errorf("open cgroup %s: %w", leaf, err)
			}
			defer unix.Close(cgFD)
		} else if len(h.threadCtrls) == 0 {
			// Without v1 controllers to hold the child from birth (a
			// pure cgroup v2 host), only CLONE_INTO_CGROUP can.
			return 0, fmt.Errorf("start in cgroup %s: kernel %s lacks clone3 CLONE_INTO_CGROUP (Linux 5.7), which a pure cgroup v2 host needs", leaf, h.kernel)
		}
	}
	if len(h.threadCtrls) == 0 {
		pid, err := fork(cgFD)
		if err == nil && cgFD < 0 && leaf != "" {
			err = placeAfterExec(leaf, pid)
		}
		return pid, err
	}
	if home == nil || home.tid != unix.Gettid() {
		return 0, fmt.Errorf("start in cgroup %s: ForkInside called off the launcher thread that made its Home", g.rel)
	}
	v1, err := g.openThreadTasks(home)
	if err != nil {
		return 0, err
	}
	defer v1.close()
	if err := v1.enter(); err != nil {
		if lerr := v1.leave(); lerr != nil {
			err = errors.Join(err, lerr)
		}
		return 0, err
	}
	bumped := h.raisePids(v1.pids)
	pid, ferr := fork(cgFD)
	lerr := h.lowerPids(bumped)
	if err := v1.leave(); err != nil {
		lerr = errors.Join(lerr, err)
	}
	if ferr != nil {
		return 0, errors.Join(ferr, lerr)
	}
	if lerr != nil {
		return pid, lerr
	}
	if cgFD < 0 && leaf != "" {
		if err := placeAfterExec(leaf, pid); err != nil {
			return pid, err
		}
	}
	return pid, nil
}

// newRunLeaf removes the group's previous run leaf (when it is empty) and
// makes a new one in the cgroup2 directory ud.
func (g *Group) newRunLeaf(ud string) (string, error) {
	if g.runLeaf != "" { // normally removed by Kill already: ENOENT
		if err := unix.Rmdir(g.runLeaf); err != nil && !errors.Is(err, unix.ENOENT) {
			// Still busy: Delete removes it with the group.
			g.h.log.Warn("previous run's cgroup not removed", "cgroup", g.runLeaf, "error", err)
		}
		g.runLeaf = ""
	}
	for range 100 {
		leaf := filepath.Join(ud, RunPrefix+strconv.FormatUint(runSeq.Add(1), 10))
		err := mkdirIn(g.h.unifiedMount, leaf)
		if errors.Is(err, unix.EEXIST) {
			continue // left by an earlier agent or another Group value
		}
		if err != nil {
			return "", fmt.Errorf("create cgroup %s: %w", leaf, err)
		}
		g.runLeaf = leaf
		g.leaf.Store(&leaf)
		return leaf, nil
	}
	return "", fmt.Errorf("create run cgroup under %s: 100 names taken", ud)
}

// placeAfterExec writes pid into the cgroup2 leaf (the fallback for
// kernels without CLONE_INTO_CGROUP, on a hybrid host only).
func placeAfterExec(leaf string, pid int) error {
	f := filepath.Join(leaf, "cgroup.procs")
	if err := kernfile.Write(f, strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("place pid %d in %s: %w", pid, f, err)
	}
	return nil
}

// mountFDs holds an open fd of each cgroup mount point ForkInside writes
// under, for the life of the process: opening a control file relative to
// it (openat(2)) skips the walk from / through /sys/fs/cgroup, about
// 3 µs of each open.
var (
	mountFDsMu sync.Mutex
	mountFDs   = map[string]int{}
)

// openIn opens file, which lies under the mount point mount, relative to
// the mount's cached fd; flags get O_CLOEXEC.
func openIn(mount, file string, flags int) (int, error) {
	dirFD, rel, err := underMount(mount, file)
	if err != nil {
		return -1, err
	}
	return unix.Openat(dirFD, rel, flags|unix.O_CLOEXEC, 0)
}

// mkdirIn makes the directory dir, which lies under the mount point mount.
func mkdirIn(mount, dir string) error {
	dirFD, rel, err := underMount(mount, dir)
	if err != nil {
		return err
	}
	return unix.Mkdirat(dirFD, rel, 0o755)
}

func underMount(mount, file string) (int, string, error) {
	rel, err := filepath.Rel(mount, file)
	if err != nil || strings.HasPrefix(rel, "..") {
		return -1, "", fmt.Errorf("%s is not under %s", file, mount)
	}
	mountFDsMu.Lock()
	defer mountFDsMu.Unlock()
	fd, ok := mountFDs[mount]
	if !ok {
		fd, err = unix.Open(mount, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, "", fmt.Errorf("open %s: %w", mount, err)
		}
		mountFDs[mount] = fd
	}
	return fd, rel, nil
}

// threadTasks is what one launcher thread writes to cross into a group's
// v1 cgroups and back.
type threadTasks struct {
	home    *Home
	ctrls   []cgroup1.Name // one per v1 hierarchy
	in      []int          // open tasks files of the group, by ctrls
	inPaths []string
	pids    []pidsLevel
}

// openThreadTasks opens, while the thread is still at home (so that the
// kernel charges the open files to the agent), every file the crossing
// writes: the group's tasks file in each v1 hierarchy, and pids.max of each
// level from <root>/jobs down to the group.
func (g *Group) openThreadTasks(home *Home) (*threadTasks, error) {
	h := g.h
	t := &threadTasks{home: home, ctrls: h.threadCtrls}
	for _, name := range h.threadCtrls {
		if _, ok := home.fds[name]; !ok {
			t.close()
			return nil, fmt.Errorf("start in cgroup %s: the launcher thread is in no %s cgroup", g.rel, name)
		}
		file := filepath.Join(h.v1Dir(name, g.rel), "tasks")
		fd, err := openIn(filepath.Join(mountRoot, string(name)), file, unix.O_WRONLY)
		if err != nil {
			t.close()
			return nil, fmt.Errorf("start in cgroup %s: open %s: %w", g.rel, file, err)
		}
		t.in = append(t.in, fd)
		t.inPaths = append(t.inPaths, file)
	}
	if h.v1Dir(cgroup1.Pids, "") != "" {
		// From the level below <root>/jobs, which carries no limit
		// (Prepare makes it without one), down to the group.
		parts := strings.Split(g.rel, "/")
		for i := range parts {
			rel := path.Join(parts[:i+1]...)
			if rel == JobsDir {
				continue
			}
			file := filepath.Join(h.v1Dir(cgroup1.Pids, rel), "pids.max")
			fd, err := openIn(filepath.Join(mountRoot, string(cgroup1.Pids)), file, unix.O_RDWR)
			if err != nil {
				t.close()
				return nil, fmt.Errorf("start in cgroup %s: open %s: %w", g.rel, file, err)
			}
			t.pids = append(t.pids, pidsLevel{rel: rel, fd: fd})
		}
	}
	return t, nil
}

var thisThread = []byte("0")

// enter moves the calling thread into the group in every v1 hierarchy.
func (t *threadTasks) enter() error {
	for i, fd := range t.in {
		if _, err := unix.Write(fd, thisThread); err != nil {
			return fmt.Errorf("move launcher thread into cgroup %s: %w", filepath.Dir(t.inPaths[i]), err)
		}
	}
	return nil
}

// leave moves the calling thread back home in every v1 hierarchy, or to the
// hierarchy's root where home refuses it (its cgroup was removed).
func (t *threadTasks) leave() error {
	var errs []error
	for _, name := range slices.Backward(t.ctrls) {
		if _, err := unix.Write(t.home.fds[name], thisThread); err == nil {
			continue
		}
		if err := kernfile.Write(t.home.roots[name], "0"); err != nil {
			errs = append(errs, fmt.Errorf("%w: thread %d, controller %s: return to %s: %w", ErrThreadStranded, t.home.tid, name, t.home.roots[name], err))
		}
	}
	return errors.Join(errs...)
}

func (t *threadTasks) close() {
	for _, fd := range t.in {
		_ = unix.Close(fd)
	}
	for _, l := range t.pids {
		_ = unix.Close(l.fd)
	}
}

// kernelAtLeast reports whether the running kernel's release (uname -r) is
// at least major.minor; release is returned for messages.
func kernelAtLeast(major, minor int) (bool, string) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false, "unknown"
	}
	release := unix.ByteSliceToString(u.Release[:])
	var maj, min int
	if _, err := fmt.Sscanf(release, "%d.%d", &maj, &min); err != nil {
		return false, release
	}
	return maj > major || (maj == major && min >= minor), release
}

// RunLeaf is the absolute cgroup2 directory of the group's latest run
// (below the group, RunPrefix and a number), "" before the first run or
// on a host without cgroup2.
func (g *Group) RunLeaf() string {
	if l := g.leaf.Load(); l != nil {
		return *l
	}
	return ""
}

// SetRunLeaf records leaf (an absolute cgroup2 directory below the
// group) as the leaf of the group's current run, when another process
// started the run (the lease guard for the agent): Processes reads that
// leaf alone, and the next ForkInside through this value removes it. A
// leaf not below the group is ignored.
func (g *Group) SetRunLeaf(leaf string) {
	ud := g.h.unifiedDir(g.rel)
	if ud == "" || filepath.Dir(leaf) != ud {
		return
	}
	g.runMu.Lock()
	defer g.runMu.Unlock()
	g.runLeaf = leaf
	g.leaf.Store(&leaf)
}
