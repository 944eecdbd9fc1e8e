// Package guard is berth's lease guard: a small long-lived process, apart
// from the agent and outside every job's cgroup, that kills every process
// of every job when the agent's fencing deadline passes and no agent has
// renewed it. The agent fences its own workers at that deadline; the guard
// covers the agent that cannot: killed with SIGKILL (outside systemd a
// job's forked processes outlive it) or hung (SIGSTOP, a stalled machine),
// so that no job runs on unseen once its claims can expire and another
// member can start it (docs/live-restart.md). It is also the jobs'
// parent: it forks them for the agent, reaps them and holds their log
// pipes, so that a restarted agent adopts them.
//
// One guard serves one agent: its data_dir and cgroup root. It listens on
// one SOCK_SEQPACKET unix socket, <data_dir>/guard.sock (SocketPath), that
// only root may use (SO_PEERCRED, unix(7)), and runs in a cgroup leaf of
// its own, <cgroup_root>/guard (CgroupLeaf) in every hierarchy, never under
// <root>/jobs or <root>/groups, so that nothing of it counts against a job.
//
// The agent's side is Client: Start connects to the guard, starting one
// (`berth guard`, detached: its own session, no parent-death signal) when
// none runs; Deadline forwards each fencing deadline; Spawn, Adopt,
// Forget and Held carry the runs over the same connection; Release,
// after the agent has stopped every job, makes the guard exit without
// killing. The guard's side is Serve (serve.go, runs.go). The wire format
// is in wire.go; legacy.go is the agent's side of a guard of the
// previous release, which serves two sockets. Every clock reading that
// crosses between them is on the initial time namespace's clock
// (internal/boottime).
package guard
