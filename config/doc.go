// Package config decodes berth's TOML files into the types of package spec.
//
// It covers the agent file (/etc/berth/berth.toml: [agent], [static],
// [cluster]), connector and sharing-group definitions ([[connector]],
// [[group]]), TOML decoding with the position of every key, and defaults.
// The vocabulary every package uses (job, connector, group, process, kind,
// task ID, protocol, restart policy, kill mode, target state, definition
// kind) is package spec's; config declares only the file's own tables
// (Config, Agent, Static, Cluster) and how they are read and checked.
//
// Parsing uses github.com/BurntSushi/toml. Every problem found is collected
// (not only the first) and returned as *Problems, data that names the file,
// line, column, key and, inside a [[connector]] or [[group]] block, the
// definition; each prints as
//
//	FILE:LINE:COL: key: message
//
// where key is the dotted TOML key path with zero-based indices for arrays,
// e.g. "connector[1].task.limits.memory" or "static.tasks[2]". LINE and COL
// (1-based; COL counts bytes) point at the key (for a table, at its "[" or
// "[[" header); without a known position an entry prints as
// "FILE: key: message".
//
// Limits are checked against their kernel bounds (package limits) and
// against the facts of a host.Host passed in by the caller (CPUs online,
// block devices, users, programs): parsing itself never reads the machine.
// Config.Jobs expands the file's workload into the jobs that are assigned,
// run and measured (spec.Workload.Jobs).
package config
