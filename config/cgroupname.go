package config

import (
	"fmt"
	"strings"
)

// kernelFilePrefixes are the prefixes of cgroup interface file names: the
// core files ("cgroup.procs") and each controller's ("memory.max",
// "cpu.cfs_quota_us"), as Documentation/admin-guide/cgroup-v2.rst
// ("Conventions": interface files are prefixed with the controller name and
// a dot) and the v1 documents under Documentation/admin-guide/cgroup-v1/
// name them.
var kernelFilePrefixes = []string{
	"cgroup", "cpu", "cpuacct", "cpuset", "memory", "io", "blkio", "pids", "rdma",
	"hugetlb", "misc", "freezer", "devices", "net_cls", "net_prio", "perf_event",
}

// kernelFiles are the cgroup v1 core files without a prefix
// (Documentation/admin-guide/cgroup-v1/cgroups.rst, "1.4 What does
// notify_on_release do ?" and "tasks").
var kernelFiles = []string{"tasks", "notify_on_release", "release_agent"}

// checkCgroupName reports whether s, a connector or group name, could be
// taken by a file the kernel itself puts in every cgroup directory. A job's
// (or group's) cgroup is a directory named after it beside such files: a
// connector named "tasks" or "memory.max" could never be made (EEXIST), and
// a name with a controller's prefix may become one with a new kernel. Every
// name berth makes a cgroup from is therefore one that no kernel file can
// take, so the map from names to cgroups stays one-to-one (docs/cases.md
// C15). Task job IDs ("<connector>-<n>") are covered by their connector's
// name.
func checkCgroupName(s string) error {
	for _, f := range kernelFiles {
		if s == f {
			return fmt.Errorf("%q is the name of a file the kernel puts in every cgroup (cgroup v1 %q); choose another name", s, f)
		}
	}
	if prefix, _, ok := strings.Cut(s, "."); ok {
		for _, p := range kernelFilePrefixes {
			if prefix == p {
				return fmt.Errorf("%q starts with %q, the prefix of the kernel's %s interface files (Documentation/admin-guide/cgroup-v2.rst, \"Conventions\"); choose another name", s, p+".", p)
			}
		}
	}
	return nil
}
