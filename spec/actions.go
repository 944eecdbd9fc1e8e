package spec

import "time"

// Target is a connector's target state as an operator set it (stored
// under targets/ in the cluster store, package cluster/store).
type Target struct {
	// State is running, paused or stopped.
	State TargetState `json:"state"`
	// By says who asked: "api 127.0.0.1:41234 (agent host-a)", "cli root@host-a".
	By string `json:"by"`
	// At is when the request was stored, by the requester's clock (UTC).
	At time.Time `json:"at"`
}

// RestartRequest is one job's pending restart (Kafka Connect's KIP-745
// restart, for one job). The agent that runs the job carries it out once,
// then removes it from the store.
type RestartRequest struct {
	Connector string `json:"connector"`
	Job       string `json:"job"`
	// OnlyFailed: restart the job only if it is FAILED when its agent
	// handles the request (KIP-745 onlyFailed).
	OnlyFailed bool `json:"only_failed"`
	// By says who asked; At is when (UTC, the requester's clock).
	By string    `json:"by"`
	At time.Time `json:"at"`
	// Rev is the store revision that wrote this request; it tells it from a
	// later request for the same job. Set by the store's reader.
	Rev int64 `json:"-"`
}
