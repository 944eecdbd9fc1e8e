// Package api is the agent's HTTP API and the client for it.
//
// It holds every response shape, defined once (the /v1 views and the Kafka
// Connect-shaped views of Connect's REST reference), the handler that
// serves them over a Backend, the operator
// actions in Connect's shapes and status codes (pause, resume, stop,
// KIP-745 restart; guard.go says who may write), JSON error bodies
// ({"error_code": N, "message": "..."}, as Connect answers, for every
// 4xx and 5xx), and a small Client that the CLI, the Connect status view
// (which asks the other agents of the cluster) and the end-to-end tests
// use.
package api
