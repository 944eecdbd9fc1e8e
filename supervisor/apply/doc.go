// Package apply writes a job's or a sharing group's limits into its
// cgroup, for the supervisor: at a start into a cgroup an earlier agent
// made (an adopted run's, whose limits this agent did not write), and in
// place on a change, where a limit the definition no longer sets is taken
// out (the kernel's default written, limits.Lift) and a resource the
// kernel refuses keeps no other out. What to write is decided by package
// limits; this package reads back and writes the cgroup files.
package apply
