// Package workload moves connector and sharing-group definitions between a
// file and the cluster store.
//
// It validates every definition before the
// store keeps it (Validator), reads the stored definitions back into a
// validated spec.Workload that leaves out only the definitions that are
// broken (Parse), and computes and applies the change that makes the store
// match a file (Plan, Apply) in an order that never shows an agent a
// connector whose group is missing. `berth apply` and the agent (which
// applies its own file's blocks at start and on reload) both use it.
package workload
