package scope

import (
	"fmt"
	"path"
	"strings"

	"github.com/containerd/cgroups/v3"
)

// Service is the systemd service unit a process runs in, as its cgroup
// names it.
type Service struct {
	// Unit is the service's unit name, "berth.service".
	Unit string
	// Cgroup is the service's cgroup path in the cgroup2 hierarchy,
	// "/system.slice/berth.service".
	Cgroup string
	// Leaf is the process's cgroup path below Cgroup: "" for the
	// service's cgroup itself, "/agent" for the leaf the agent moved
	// itself into.
	Leaf string
}

// Slice is the slice unit the service runs in ("system.slice"): the last
// element of its cgroup's parent, "-.slice" at the top.
func (s Service) Slice() string {
	dir := path.Dir(s.Cgroup)
	if dir == "/" {
		return "-.slice"
	}
	return path.Base(dir)
}

// JobsScope is the name of the scope unit that holds the service's jobs:
// "berth.service" -> "berth-jobs.scope".
func (s Service) JobsScope() string {
	return strings.TrimSuffix(s.Unit, ".service") + "-jobs.scope"
}

// OwnService returns the service this process runs in, read from
// /proc/self/cgroup; ok is false when it runs in no service unit (not
// under systemd, in a scope or a user session) or on a host without a
// cgroup2 hierarchy.
//
// Errors: /proc/self/cgroup cannot be read.
func OwnService() (s Service, ok bool, err error) {
	_, unified, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		return Service{}, false, fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	s, ok = serviceOf(unified)
	return s, ok, nil
}

// serviceOf is the service of the process whose cgroup2 path is p: the
// innermost element of p named *.service, at most one level above p (the
// agent's leaf). An element with a "@" is a template instance and keeps
// its name ("berth@a.service").
func serviceOf(p string) (Service, bool) {
	if p == "" || !strings.HasPrefix(p, "/") {
		return Service{}, false
	}
	p = path.Clean(p)
	for _, cg := range []string{p, path.Dir(p)} {
		if base := path.Base(cg); strings.HasSuffix(base, ".service") && len(base) > len(".service") {
			leaf := strings.TrimPrefix(p, cg)
			return Service{Unit: base, Cgroup: cg, Leaf: leaf}, true
		}
	}
	return Service{}, false
}

// mountRoot is where the cgroup2 hierarchy is mounted on a unified host.
const mountRoot = "/sys/fs/cgroup"
