// Package source says which jobs an agent must run, and holds the claims
// that let it run them. A Source is either Static, the agent's own file with
// no store (one host, the agent its only member), or Cluster, a member of a
// berth cluster over etcd: a session lease, the leader campaign, the
// published assignment, the stored workload and job claims. The agent loop
// (package supervisor) uses only the Source interface, never a concrete
// type.
//
// A Cluster source fences: when its session ends it calls the agent's Fence
// before the lease can expire on the server (so no job runs twice), then
// joins again.
package source
