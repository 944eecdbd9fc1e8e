// Package supervisor is the berth agent's loop.
//
// It turns what its Source says the agent must run into workers in cgroups
// (reconcile: stop what is
// no longer assigned, restart what changed in a way that needs a new
// process, update limits in place, start what is missing), fences when the
// source loses its membership, kills what an earlier run left behind before
// it starts anything, reloads its file without harming running jobs, keeps
// one agent per data_dir and cgroup root (lock files), and reports health.
// It serves the api package's handler and the metrics package's registry;
// it owns no response shape and no collector of its own.
package supervisor
