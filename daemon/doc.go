// Package daemon wires one berth agent together around its supervisor.
//
// Run takes the agent's locks (data_dir, cgroup root), listens, opens and
// prepares the cgroup hierarchy and kills what an earlier run left, serves
// the HTTP API and /metrics (api, metrics), starts the embedded etcd when
// [cluster] names no endpoints, connects, stores the file's workload and
// joins (source), then runs the supervisor until it is asked to stop.
// Reload re-reads the file, stores its workload and puts it in force. The
// API's store writes (target states, restart requests) and cluster-wide
// views (members, assignment, workload) go to the store directly; the
// supervisor's View gives the jobs.
package daemon
