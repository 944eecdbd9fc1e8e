package cluster

import "github.com/berthd/berth/cluster/store"

// The store's records, under the names this package's API has always
// used; they are defined, with their keys and stored forms, in package
// store.
type (
	// Validator checks one workload definition before it is stored
	// (store.Validator).
	Validator = store.Validator
	// MemberRecord is what an agent registers under members/<id>
	// (store.MemberRecord).
	MemberRecord = store.MemberRecord
	// Target is a connector's target state as an operator set it
	// (store.Target).
	Target = store.Target
	// RestartRequest is one job's pending restart (store.RestartRequest).
	RestartRequest = store.RestartRequest
	// Actions is every target state and pending restart
	// (store.Actions).
	Actions = store.Actions
)
