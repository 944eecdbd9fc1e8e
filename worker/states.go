package worker

// Waiting is the state of a job whose claim another member still holds: it
// has no worker yet. The agent reports it beside the worker states.
const Waiting State = "waiting"

// States lists every state a job can be in, worker states and Waiting, in
// the order metrics and status report them.
func States() []State {
	return []State{Waiting, Starting, Running, BackingOff, Exited, Failed, Stopping, Stopped}
}
