// Package limits defines the resource limits of a job or a sharing group.
//
// It holds the Limits type with its units (cores, bytes, bytes/s, I/O per
// second) and the table of limits (Keys, limits.go): one row per key of a
// limits table with its meaning, bounds and example, how a file's value is
// checked and kept (Key.Decode), how it is shown (Key.Value, Key.Format),
// how it is written as the OCI runtime-spec's specs.LinuxResources that the
// cgroup package writes (Resources) and how it is taken out again when a
// definition drops it (Lift, Defaults). The configuration's decoder, its
// reference (docs/config.md), the changes a reload logs, the API's view and
// berth validate's plan all read that table, so a new limit is a field of
// Limits, a row of the table and its cgroup write per cgroup version.
//
// It also holds the kernel's bounds for each value (bounds.go, with the
// kernel document that sets each), the parsing of byte sizes and CPU lists
// as operators write them, and the resolution of an io limit's device to
// its whole disk.
//
// It depends on no other berth package.
package limits
