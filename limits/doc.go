// Package limits defines the resource limits of a job or a sharing group.
//
// It holds the Limits type with its units (cores, bytes, bytes/s, I/O per second),
// the kernel's bounds for each value (bounds.go, with the kernel document
// that sets each), the parsing of byte sizes and CPU lists as operators
// write them, the resolution of an io limit's device to its whole disk, and
// the conversion to the OCI runtime-spec's specs.LinuxResources that the
// cgroup package writes.
//
// It depends on no other berth package.
package limits
