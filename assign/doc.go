// Package assign computes which member of a berth cluster runs which job.
//
// The assignment is a pure, deterministic function of the live members, the
// workload and the previous assignment (docs/design.md, "Assignment rules",
// rules 1–7): the same input in any order — members, connectors
// and declared lists shuffled, entries duplicated — gives the same output
// (FLINK-3315: grouping never depends on declaration order). The rules come
// from Kafka Connect's static-assignment proposal (KIP-987) and its
// incremental cooperative assignor (KIP-415).
//
// The package does no I/O, keeps no state and never fails: anything it cannot
// place is reported in [Assignment.Unassigned] with a reason. Numbering
// assignments (the generation) and revoking moved jobs before they start
// elsewhere are the cluster layer's work.
package assign
