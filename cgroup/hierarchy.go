package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	cgroups "github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

// v1Controllers are the v1 controllers berth uses, in the order it creates
// them. devices, net_cls and the named systemd hierarchy are deliberately
// left alone: berth does not restrict devices.
var v1Controllers = []cgroup1.Name{
	cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Cpuset, cgroup1.Memory,
	cgroup1.Pids, cgroup1.Blkio, cgroup1.Freezer,
}

// v2Controllers are the cgroup v2 controllers berth enables down to its jobs
// (Documentation/admin-guide/cgroup-v2.rst, "Controllers").
var v2Controllers = []string{"cpu", "cpuset", "io", "memory", "pids"}

// ErrInvalidPath is returned (wrapped) for a relative group path that is
// absolute, empty where a group is required, or escapes the root with "..".
var ErrInvalidPath = errors.New("invalid cgroup path")

// Hierarchy is berth's subtree (cgroup_root) in every mounted hierarchy.
//
// A Hierarchy is safe for concurrent use once opened; SetLogger must be
// called before it is shared.
type Hierarchy struct {
	mode Mode
	// v is the cgroup version that drives the groups, chosen by mode once
	// (versionFor).
	v version
	// root is the cgroup path of berth's root inside each hierarchy when
	// it is the same everywhere ("/berth"); with a delegated root taken
	// from /proc/self/cgroup the v1 paths may differ per controller and
	// live in v1Roots.
	root string
	// v1Roots maps each mounted v1 controller to the cgroup path of the
	// root in that controller's hierarchy.
	v1Roots map[cgroup1.Name]string
	// subsystems are containerd's handles for the mounted v1 controllers.
	subsystems []cgroup1.Subsystem
	// unifiedMount is the cgroup2 mount point ("" when none).
	unifiedMount string
	// unifiedRoot is the cgroup path of the root inside cgroup2.
	unifiedRoot string
	// delegated is true when the root was given to berth (systemd
	// Delegate=yes): berth may not write above it.
	delegated bool
	notes     []string
	log       *slog.Logger

	// threadCtrls are the v1 controllers a launcher thread crosses into,
	// in order, one per mounted hierarchy (comounted controllers such as
	// cpu,cpuacct appear once), cpu last; empty on a unified host.
	threadCtrls []cgroup1.Name
	// cloneInto is true when a cgroup2 hierarchy is mounted and the kernel
	// has clone3 CLONE_INTO_CGROUP (Linux 5.7); kernel is its release.
	cloneInto bool
	kernel    string
	// pidsMu guards pidsInside and pidsLimits: how many launcher threads
	// sit in each v1 pids cgroup (by rel) and the configured limit of each
	// such cgroup while they do (-1 for none); see ForkInside.
	pidsMu     sync.Mutex
	pidsInside map[string]int
	pidsLimits map[string]int64
}

// Open detects the host's Mode and returns the hierarchy rooted at root.
//
// root is a cgroup path inside each hierarchy: "berth" and "/berth" both mean
// /sys/fs/cgroup/<controller>/berth on v1 and /sys/fs/cgroup/berth on v2.
// An empty root means "the cgroup this process is in" (read from
// /proc/self/cgroup), which is what an agent started by systemd with
// Delegate=yes uses; see OpenDelegated.
//
// Open creates nothing; call Prepare before the first New. v1 controllers
// that are not mounted are skipped and reported by Notes.
//
// Errors: the host has no cgroup file system; root contains ".."; on a v1
// host none of the controllers berth uses is mounted; /proc/self/cgroup
// cannot be read (root "").
func Open(root string) (*Hierarchy, error) {
	if root == "" {
		return OpenDelegated("")
	}
	return open(root, false)
}

// OpenDelegated is Open for a root that was delegated to berth (systemd
// Delegate=yes, e.g. "/system.slice/berth.service"), or, when root is "",
// the cgroup this process is in. Prepare then never writes above root, and on
// cgroup v2 moves the agent out of root into <root>/agent first (the
// no-internal-processes rule, cgroup-v2.rst "No Internal Process
// Constraint").
//
// Errors: as Open.
func OpenDelegated(root string) (*Hierarchy, error) {
	return open(root, true)
}

func open(root string, delegated bool) (*Hierarchy, error) {
	h := &Hierarchy{
		mode: DetectMode(), delegated: delegated, log: slog.Default(), v1Roots: map[cgroup1.Name]string{},
		pidsInside: map[string]int{}, pidsLimits: map[string]int64{},
	}
	if h.mode == Unavailable {
		return nil, fmt.Errorf("open cgroup root %q: no cgroup file system mounted at %s", root, mountRoot)
	}
	var selfV1 map[string]string
	var selfUnified string
	if root == "" {
		var err error
		selfV1, selfUnified, err = cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
		if err != nil {
			return nil, fmt.Errorf("open own cgroup: read /proc/self/cgroup: %w", err)
		}
	} else {
		clean, err := cleanRoot(root)
		if err != nil {
			return nil, fmt.Errorf("open cgroup root %q: %w", root, err)
		}
		h.root = clean
	}
	switch h.mode {
	case Unified:
		h.unifiedMount = mountRoot
	case Hybrid:
		h.unifiedMount = hybridUnifiedMount
	}
	if h.unifiedMount != "" {
		h.unifiedRoot = h.root
		if root == "" {
			h.unifiedRoot = ownRoot(selfUnified)
		}
	}
	if h.mode == Legacy || h.mode == Hybrid {
		for _, name := range v1Controllers {
			dir := filepath.Join(mountRoot, string(name))
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
				h.notes = append(h.notes, fmt.Sprintf("v1 controller %s is not mounted at %s: not used", name, dir))
				continue
			}
			base := h.root
			if root == "" {
				p, ok := selfV1[string(name)]
				if !ok {
					h.notes = append(h.notes, fmt.Sprintf("v1 controller %s: this process is in no %s cgroup: not used", name, name))
					continue
				}
				base = ownRoot(p)
			}
			h.v1Roots[name] = base
			h.subsystems = append(h.subsystems, newSubsystem(name))
		}
		if len(h.subsystems) == 0 {
			return nil, fmt.Errorf("open cgroup root %q: none of the v1 controllers %v is mounted under %s", root, v1Controllers, mountRoot)
		}
		// The thread enters cpu last and leaves it first: a job whose CPU
		// quota is spent throttles every task of its cpu cgroup, the
		// launcher thread included, until the next period.
		order := slices.Clone(h.subsystems)
		slices.SortStableFunc(order, func(a, b cgroup1.Subsystem) int {
			isCPU := func(s cgroup1.Subsystem) int {
				if s.Name() == cgroup1.Cpu {
					return 1
				}
				return 0
			}
			return isCPU(a) - isCPU(b)
		})
		seen := map[string]bool{}
		for _, s := range order {
			real, err := filepath.EvalSymlinks(filepath.Join(mountRoot, string(s.Name())))
			if err != nil {
				real = filepath.Join(mountRoot, string(s.Name()))
			}
			if !seen[real] {
				seen[real] = true
				h.threadCtrls = append(h.threadCtrls, s.Name())
			}
		}
	}
	if h.unifiedMount != "" {
		h.cloneInto, h.kernel = kernelAtLeast(5, 7)
	}
	h.v = versionFor(h)
	return h, nil
}

// cleanRoot turns "berth" or "/system.slice/berth.service" into an absolute,
// clean cgroup path; ".." is refused.
func cleanRoot(root string) (string, error) {
	for _, part := range strings.Split(root, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q has a \"..\" element", ErrInvalidPath, root)
		}
	}
	return path.Clean("/" + root), nil
}

// cleanRel validates a group path relative to the root, such as
// "groups/sinks/orders-sink-0", and returns it cleaned ("" for the root).
func cleanRel(rel string) (string, error) {
	if strings.HasPrefix(rel, "/") {
		return "", fmt.Errorf("%w: %q must be relative to the root", ErrInvalidPath, rel)
	}
	for _, part := range strings.Split(rel, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q has a \"..\" element", ErrInvalidPath, rel)
		}
	}
	c := path.Clean(rel)
	if c == "." {
		return "", nil
	}
	return c, nil
}

// SetLogger sets where the hierarchy logs notes (a limit with no effect in
// this mode, a retry). The default is slog.Default().
func (h *Hierarchy) SetLogger(l *slog.Logger) {
	if l != nil {
		h.log = l
	}
}

// Mode reports the detected layout.
func (h *Hierarchy) Mode() Mode { return h.mode }

// Root returns the root's cgroup path inside the hierarchies, as
// /proc/PID/cgroup names it: "/berth", or for a delegated root the
// agent's own cgroup ("/system.slice/berth.service"). Where a delegated root
// differs per v1 controller, the cgroup2 path is returned, else the first
// controller's.
func (h *Hierarchy) Root() string {
	if h.root != "" {
		return h.root
	}
	if h.unifiedRoot != "" {
		return h.unifiedRoot
	}
	for _, s := range h.subsystems {
		return h.v1Roots[s.Name()]
	}
	return "/"
}

// Notes lists what Open found worth telling an operator: v1 controllers that
// are not mounted and are therefore not used.
func (h *Hierarchy) Notes() []string { return slices.Clone(h.notes) }

// Controllers lists the v1 controllers in use (nil on a unified host).
func (h *Hierarchy) Controllers() []string {
	var out []string
	for _, s := range h.subsystems {
		out = append(out, string(s.Name()))
	}
	return out
}

// v1Path is containerd's per-controller path function for rel.
func (h *Hierarchy) v1Path(rel string) cgroup1.Path {
	return func(name cgroup1.Name) (string, error) {
		base, ok := h.v1Roots[name]
		if !ok {
			return "", cgroup1.ErrControllerNotActive
		}
		return path.Join(base, rel), nil
	}
}

// v1Hierarchy is containerd's subsystem list restricted to berth's
// controllers.
func (h *Hierarchy) v1Hierarchy() ([]cgroup1.Subsystem, error) {
	return h.subsystems, nil
}

// dirs returns the absolute directory of rel in every hierarchy in use:
// each v1 controller's, then the unified one.
func (h *Hierarchy) dirs(rel string) []string {
	var out []string
	for _, s := range h.subsystems {
		out = append(out, filepath.Join(mountRoot, string(s.Name()), h.v1Roots[s.Name()], rel))
	}
	if d := h.unifiedDir(rel); d != "" {
		out = append(out, d)
	}
	return out
}

// unifiedDir is rel's directory in cgroup2, "" when there is no cgroup2.
func (h *Hierarchy) unifiedDir(rel string) string {
	if h.unifiedMount == "" {
		return ""
	}
	return filepath.Join(h.unifiedMount, h.unifiedRoot, rel)
}

// Children lists the names of the child cgroups of rel ("" is the root),
// sorted. It is the union over every hierarchy, so a group left behind in
// only some controllers (a partial delete) is still found. A rel that exists
// nowhere has no children.
//
// Errors: rel is invalid; a directory cannot be read.
func (h *Hierarchy) Children(rel string) ([]string, error) {
	rel, err := cleanRel(rel)
	if err != nil {
		return nil, fmt.Errorf("list children: %w", err)
	}
	var names []string
	seen := map[string]bool{} // a name is in every hierarchy: O(1) each, not a scan of names
	for _, dir := range h.dirs(rel) {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list children of cgroup %s: %w", dir, err)
		}
		for _, e := range entries {
			if e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// ownRoot is the delegated root for a process in cgroup p: p itself, or its
// parent when the process already sits in the root's agent leaf (it moved
// itself there, or it was restarted inside it): the root is never the leaf.
func ownRoot(p string) string {
	p = path.Clean("/" + p)
	if path.Base(p) == AgentDir {
		return path.Dir(p)
	}
	return p
}
