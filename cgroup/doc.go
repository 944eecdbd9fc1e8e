// Package cgroup makes, limits, measures, kills and removes berth's
// control groups: one per job and one per sharing group.
//
// It works over github.com/containerd/cgroups/v3 on cgroup v1 (legacy and
// hybrid) and cgroup v2 (unified), and is the only package that writes to
// the cgroup file systems: it creates a group with its limits, updates
// them in place, reads the group's usage (CPU, memory, pids, I/O, OOM
// kills, pressure), kills every process in it, deletes it from every
// hierarchy, and finds what an earlier run left behind.
//
// Layout: every group lives at the same path relative to berth's root in
// every hierarchy it uses. On a v1 or hybrid host the v1 controllers cpu,
// cpuacct, cpuset, memory, pids, blkio and freezer do all the limiting and
// accounting; on a hybrid host the controller-less cgroup2 mount
// (/sys/fs/cgroup/unified) additionally holds every group, for tracking and
// for cgroup.kill only, as systemd does in hybrid mode. It never carries
// limits. On a unified (v2) host the single hierarchy does everything. In
// cgroup2 (either kind of host) a job's processes sit in a leaf below the
// job's group, one per run (<group>/run-<n>); the group's limits and
// counters cover it. docs/design.md, "cgroup layout", draws the tree.
package cgroup
