// Package boottime reads CLOCK_BOOTTIME in the one clock domain every
// process of the host shares: the initial time namespace's.
//
// CLOCK_BOOTTIME (clock_gettime(2)) never jumps with the wall clock and
// keeps counting while the system is suspended, as an etcd lease does; so
// berth hands its fencing deadlines to the lease guard, and keeps when a
// job's restart is due across agents, on it. But a process in a time
// namespace of its own reads it shifted by that namespace's offset
// (time_namespaces(7): `unshare --time --boottime 600` makes it read 600 s
// ahead), and an agent and a guard need not share one: a guard started by
// an agent outside the namespace serves the agent started in it next, and
// the other way round. A reading that crosses from one process to another
// is therefore always taken here, converted to the initial namespace's
// clock with this process's offset from /proc/self/timens_offsets (fixed
// for as long as the process lives: a namespace's offsets cannot change
// once a process has entered it). OffsetOf gives another process's
// offset, for a peer that expects its own namespace's readings.
//
// A process's start time in /proc/PID/stat (field 22, clock ticks after
// boot) is shown shifted by the reader's offset too: StartTicks and
// ShiftTicks convert it, so that a run recorded by a guard in one
// namespace passes the identity check of an agent in another.
package boottime
