// Package limits is the TOML model of berth's configuration: the agent file
// (/etc/berth/berth.toml), connector and sharing-group definitions, their
// units, strict validation, job expansion and the conversion of a job's or a
// group's limits to runtime-spec's specs.LinuxResources.
//
// Parsing uses github.com/BurntSushi/toml. Every problem found in a file is
// collected (not only the first) and returned as *Errors; each entry prints
// as
//
//	FILE:LINE:COL: key: message
//
// where key is the dotted TOML key path with zero-based indices for arrays,
// e.g. "connector[1].task.limits.memory", "group[0].name",
// "connector[0].task.limits.io[0].device" or "static.tasks[2]". LINE and COL
// (1-based; COL counts bytes) point at the key (for a table, at its "[" or
// "[[" header). When the position of a key cannot be determined the entry
// prints as "FILE: key: message".
//
// The package depends on no other berth package.
package limits
