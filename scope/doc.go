// Package scope keeps the jobs of an agent that systemd runs as a service
// in a scope unit of their own, so that what systemd does to the service
// when the agent process ends (its KillMode=control-group kill of every
// process left in the unit's cgroup, then Restart=) never reaches a job.
// It is Slurm's pattern for slurmd and its steps: one transient scope,
// made once over D-Bus, Delegate=yes, whose cgroup subtree belongs to
// berth (https://systemd.io/CGROUP_DELEGATION). Limits are still written
// by berth to the cgroup files inside it, never as unit properties that a
// daemon-reload would revert.
//
// The scope of berth.service is berth-jobs.scope, in the service's slice,
// ordered Before=berth.service so that at shutdown the service (whose
// stop stops every job in order) stops first. Its cgroup is berth's
// cgroup root: <scope>/guard holds the lease guard, the jobs' parent;
// <scope>/jobs and <scope>/groups hold the jobs. The agent itself stays
// in the service's cgroup. When the guard has exited and the last job
// process is gone the scope is empty and systemd removes it.
//
// Restarting tells a restart of the service (systemctl restart: the agent
// hands its jobs to the next agent) from a stop (every job stopped).
//
// Only a pure cgroup v2 host (systemd's unified mode) is served: on a
// hybrid or legacy host the jobs stay in the service's own cgroup.
package scope
