// Package cgroup makes, limits, measures, kills and removes per-job cgroups.
//
// It works on cgroup v1 (legacy and hybrid hosts) and cgroup v2 (unified
// hosts), over github.com/containerd/cgroups/v3.
//
// # Layout
//
// Every group lives at the same path relative to berth's root (JobRel,
// GroupRel) in every hierarchy it uses. On a v1 or hybrid host the v1
// controllers cpu, cpuacct, cpuset, memory, pids, blkio and freezer do all
// the limiting and accounting; on a hybrid host the controller-less
// cgroup2 mount (/sys/fs/cgroup/unified) additionally holds every group,
// for tracking, cgroup.kill and pressure only, as systemd does in hybrid
// mode: it never carries limits. On a unified (v2) host the single
// hierarchy does everything. In cgroup2 (either kind of host) a job's
// processes sit in a leaf below the job's group, one per run
// (<group>/run-<n>, see Group.ForkInside); the group's limits and counters
// cover it.
//
// # Versions
//
// Open detects the host's Mode once and picks the version that drives it
// (version.go): cgroupV1 (v1.go) or cgroupV2 (v2.go). Nothing else asks
// which mode the host is in.
//
// # Controllers
//
// One file per controller holds what berth writes to it and what it reads
// from it, in the kernel's words (Documentation/admin-guide/cgroup-v2.rst,
// Documentation/admin-guide/cgroup-v1/): cpu.go (cpu.max quota/period,
// cpu.weight; cpu.stat), memory.go (memory.max, memory.swap.max;
// memory.current, memory.events oom_kill), io.go (io.max, io.weight;
// io.stat), pids.go (pids.max; pids.current), cpuset.go (cpuset.cpus,
// cpuset.mems) and pressure.go (cpu.pressure, memory.pressure,
// io.pressure). containerd writes most limits; the controller files hold
// berth's corrections and the v1 files berth writes itself.
//
// # Operations
//
// The operations that are not a controller's have their own files:
// prepare.go (the root and its subtrees), group.go (create, load, update),
// launch.go (start a process inside a group from birth), procs.go (a
// group's processes), kill.go (kill every process), delete.go (remove from
// every hierarchy), cleanup.go (leftovers of an earlier run).
//
// # Usage
//
// Usage is the one model of what the metrics collectors and the API read
// about a group: the kernel's counters and the limits in force.
// Group.Usage reads the few files that change between scrapes, with the
// limits berth applied (the hot path of a scrape of thousands of jobs);
// Group.FullUsage adds block I/O and reads the limits back from the
// kernel. The files are read and parsed by package internal/kernfile,
// which the metrics' /proc reads share.
package cgroup
