// Package memwatch tells an agent when a job's memory comes under
// pressure, before the kernel's OOM killer acts, without polling: one
// Watcher per agent (one goroutine, one epoll set) and one descriptor per
// job, no goroutine and no timer per job.
//
// # The rule per cgroup version
//
// Watch picks the mechanism from the cgroup version that accounts the
// job's memory (Target.Mechanism):
//
//   - cgroup v2 (a unified host): a PSI trigger on the job's cgroup's
//     memory.pressure (Documentation/accounting/psi.rst). Under memory.high
//     the kernel throttles and reclaims, and the job's "some" stall share
//     rises before memory.max is reached; the rule is that share at least
//     Rule.Limit percent, held for Rule.Duration (see Rule and
//     psiState.observe for how a Duration longer than one window is
//     held).
//   - cgroup v1 memory (legacy and hybrid hosts): a usage threshold at
//     Rule.High (memory_high, which v1 cannot enforce) through
//     cgroup.event_control and an eventfd
//     (Documentation/admin-guide/cgroup-v1/memory.rst "Memory
//     thresholds"). At the v1 limit, anonymous memory without swap is
//     OOM-killed after a few milliseconds of stall: PSI gives no warning,
//     the threshold does.
//
// # Delivery
//
// The watcher's loop queues each event for its owner and never waits for
// it: the owner waits on Watcher.Ready and takes the events with
// Watcher.Drain. A handle has at most one event waiting (merged: a Gone or
// Failed one wins, an Over is never replaced by an Under), so the queue
// is bounded by the number of watches however slow the owner is.
//
// # Costs
//
// A v1 watch holds an eventfd (the usage file is closed once the
// threshold is registered). A v2 watch holds its pressure file. The kernel
// waits for an RCU grace period (about 10 to 30 ms on a busy host) in each
// threshold registration (Watch) and in each trigger's destruction
// (Handle.Close of a PSI watch); both run in the caller's goroutine, never
// in the watcher's loop, and concurrent calls share grace periods.
//
// A trigger made with CAP_SYS_RESOURCE is checked ten times per window by
// a real-time kernel thread of its cgroup ("psimon"), which the kernel
// makes for the first such trigger of a cgroup and ends with the last: a
// crossing is seen within a tenth of a window (at most 200 ms here). One
// made without that capability (berth's systemd unit leaves it out) is
// checked by the kernel's 2 s averaging instead: no thread, a 2 s window,
// and up to about 2 s from the crossing to the event. Such a trigger also
// misses an update when its cgroup's pressure file is read just as the
// update is due (kernel/sched/psi.c: psi_show folds the averages without
// the triggers): a scrape every few seconds delays an event by 2 s at
// worst, rarely; a reader in a tight loop starves the trigger.
//
// # Notification of the job
//
// Notify gives a job systemd's memory pressure service protocol
// (systemd.io/MEMORY_PRESSURE): the environment that points it at its own
// cgroup's memory.pressure with the trigger to write, so that libraries
// that follow the protocol shed their caches; Delegate lets a job with
// `user` write its trigger.
package memwatch
