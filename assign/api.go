package assign

import (
	"time"

	"github.com/berthd/berth/spec"
)

// Member is one live agent as it registered itself.
//
// Entries with an empty ID are ignored. Several entries with the same ID are
// merged: their declarations are united, and the member speaks static only if
// every entry says spec.ProtocolStatic. Empty strings in the declared lists are ignored.
type Member struct {
	ID         string        // agent ID, unique in the cluster
	Protocol   spec.Protocol // ProtocolStatic; anything else, "" included, is balanced
	Connectors []string      // declared static.connectors (connector names)
	Tasks      []string      // declared static.tasks (task job IDs, "<connector>-<n>")
}

// Connector is one workload definition as assignment needs it.
//
// Entries with an empty Name are ignored; of several entries with one Name
// the one that sorts first by (Run true first, more Tasks first, Group)
// is used (limits validation rejects such workloads before they get here).
type Connector struct {
	Name  string // connector name; also the ID of its own job when Run is true
	Run   bool   // the connector has its own job (a [connector.run] block)
	Tasks int    // number of task jobs: "<Name>-0" … "<Name>-<Tasks-1>"; ≤ 0 means none
	Group string // sharing group name (Flink slotSharingGroup), "" for none
}

// Input is everything the assignment depends on.
type Input struct {
	// Members are the live members (their session leases are alive).
	Members []Member
	// Connectors is the workload; see [Jobs] for the job IDs it yields.
	Connectors []Connector
	// Previous is the last published assignment (zero value: none). It gives
	// stability (a job stays where it is when it can), the jobs of departed
	// members (rule 5, through Previous.Members and Previous.Held) and the
	// declarations of absent members (Previous.Declared).
	Previous Assignment
	// LastSeen is when each member, also a departed one, was last seen live.
	// A departed member without an entry is not held for (rule 5).
	LastSeen map[string]time.Time
	// Now is the time of this computation; only compared with LastSeen.
	Now time.Time
	// RebalanceDelay is how long a departed member's jobs stay unassigned
	// after its LastSeen (rule 5; Connect's scheduled.rebalance.max.delay.ms).
	// Zero or negative: they are reassigned at once.
	RebalanceDelay time.Duration
}

// Conflict records a job declared by more than one live member (rule 4).
// Conflicts are reported whatever protocol the members speak; the job goes
// to Winner only when every live member speaks static (rule 1).
type Conflict struct {
	Job     string   // job ID
	Members []string // declaring member IDs, sorted
	Winner  string   // lowest member ID, Members[0]
}

// Assignment is the result: a pure function of Input.
//
// Every job of the workload appears exactly once, either under one member in
// Members or in Unassigned. The maps are never nil; Conflicts is nil when
// there are none. The cluster layer publishes the whole value and passes it
// back as Input.Previous next time.
type Assignment struct {
	// Members maps every live member ID to its sorted job IDs (empty, not
	// nil, when it runs nothing).
	Members map[string][]string
	// Unassigned maps job ID -> why it runs nowhere: "held for member X until
	// <RFC3339 UTC time>" (rule 5), "declared by absent member X; no standby",
	// "declared by nobody; no standby" (rule 1), "no live member".
	Unassigned map[string]string
	// Conflicts lists jobs declared by more than one live member, sorted by Job.
	Conflicts []Conflict
	// Held maps job ID -> departed member ID for jobs kept unassigned by
	// rule 5; it carries the hold across generations until the delay ends.
	Held map[string]string
	// Declared maps job ID -> the member whose declaration claims it: the
	// winning live declarer (rule 4), or, when no live member declares the
	// job, an absent member that declared it earlier (carried from
	// Previous.Declared). Jobs nobody declares are absent.
	Declared map[string]string
}
