// Package worker runs one job's process, and all its descendants, inside
// that job's cgroup: it shows how a job's process is born and how it dies.
//
// Birth. A worker's main process never runs outside its cgroup, not even for
// a moment. The agent forks its own binary (/proc/self/exe) in a hidden
// helper mode; the helper blocks on a pipe while the agent writes its pid
// into the group's cgroup.procs file in every hierarchy, v1 and v2
// (Documentation/admin-guide/cgroup-v1/cgroups.rst,
// Documentation/admin-guide/cgroup-v2.rst), then the helper execs the job.
// clone3(CLONE_INTO_CGROUP) is not used: see spawn for the kernel behaviour
// that rules it out. Every fork happens on one goroutine locked
// to an OS thread that lives as long as the agent, because Pdeathsig fires
// when the forking thread exits, not the process (golang/go#27505).
//
// Death. The agent is a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER)
// and one process-wide reaper collects every child with wait4(-1): the exit
// status of a worker's main process goes to its worker, orphans reparented to
// the agent are reaped silently (CASES C9, pebble#71). When the main process
// ends, the rest of the cgroup is killed (CASES C3); Stop sends SIGTERM, waits
// StopTimeout, then kills the whole cgroup (CASES C4).
//
// Contract for the program that uses this package: main must call
// MaybeRunHelper first thing, and the program must not start other children
// with os/exec or os.Process.Wait, because the reaper's wait4(-1) would steal
// their exit status.
package worker
