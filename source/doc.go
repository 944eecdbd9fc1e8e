// Package source says which jobs an agent must run, and holds the claims
// that let it run them. The agent loop (package supervisor) uses only the
// Source interface, never a concrete type. Its implementation is Cluster, a
// member of a berth cluster over etcd: a session lease, the leader
// campaign, the published assignment, the stored workload and job claims.
// One host is a one-member cluster on an embedded etcd, so that an agent
// behaves the same alone and among many; the supervisor's tests drive the
// loop through a fake Source.
//
// A Cluster source fences: when its session ends it calls the agent's Fence
// before the lease can expire on the server (so no job runs twice), then
// joins again.
package source
