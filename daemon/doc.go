// Package daemon wires one berth agent together around its supervisor.
//
// Run takes the agent's locks (data_dir, cgroup root), listens, opens and
// prepares the cgroup hierarchy and kills what an earlier run left, serves
// the HTTP API and /metrics (api, metrics), starts the embedded etcd when
// [cluster] names no endpoints, connects, stores the file's workload and
// joins (source), then runs the supervisor until it is asked to stop.
// Reload re-reads the file, stores its workload and puts it in force
// (confState holds the file in force and how its reloads went).
//
// The API and the metrics see the agent through backend, a type of its
// own: it reads the supervisor's View and the source's Info and converts
// them into the API's and the metrics' types; its store writes (target
// states, restart requests) and cluster-wide views (members, assignment,
// workload) go to the store directly.
package daemon
