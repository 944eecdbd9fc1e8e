// Package kernfile reads and parses the kernel's small interface files,
// those of a cgroup file system and of procfs, without allocating.
//
// Reading: ReadAt reads a file relative to a directory fd into a caller's
// buffer with one openat(2), read(2) and close(2) (these files are
// seq_files: one read with room to spare returns the whole content),
// ReadPath does the same for a path built in place (Path) without
// allocating, Read
// reads a file of any length, Write writes one value. os.Open would also
// register every such file with the runtime's poller (epoll_ctl, refused
// for them), which doubles the system calls of a scrape that reads a few
// files of every job.
//
// Parsing follows the formats of Documentation/admin-guide/cgroup-v2.rst,
// "Conventions" (also those of the v1 files and of proc(5)):
//
//   - a single value per file (memory.current, pids.max: Uint);
//   - flat keyed, one "KEY VALUE" per line (cpu.stat, memory.events,
//     v1 memory.oom_control), or "KEY: VALUE" in /proc/PID/status and
//     /proc/PID/io (Keyed);
//   - nested keyed, one "NAME SUB_KEY=VALUE ..." per line (io.stat,
//     cpu.pressure; Nested and Field).
//
// prometheus/procfs parses whole /proc files with fmt scanning and
// allocates per read; berth uses it where a read is rare (Kill) and this
// package where a file of every job is read at every scrape.
package kernfile
