package worker

// States the agent reports beside the worker states, for a job that has no
// worker or whose worker is being replaced.
const (
	// Waiting: another member still holds the job's claim; it has no
	// worker yet.
	Waiting State = "waiting"
	// Paused: the job's connector is paused (berth pause, PUT
	// /connectors/{name}/pause): no process, no cgroup, no claim.
	Paused State = "paused"
	// Restarting: an operator's restart request is being carried out: the
	// job's worker is stopped and a new one starts.
	Restarting State = "restarting"
)

// States lists every state a job can be in, worker states and the
// agent's, in the order metrics and status report them.
func States() []State {
	return []State{Waiting, Starting, Running, BackingOff, Exited, Failed, Stopping, Stopped, Paused, Restarting}
}
