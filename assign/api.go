// Package assign computes which member of a berth cluster runs which job.
//
// THIS FILE IS THE CONTRACT STUB written before the implementation; the
// implementation keeps these names and shapes (it may add fields and split
// the file).
package assign

import "time"

// Protocol is the assignment protocol a member speaks (KIP-987).
type Protocol string

const (
	// Static: the member's declared jobs go to it (KIP-987 `static`).
	Static Protocol = "static"
	// Balanced: the member takes part in count-balanced placement only.
	Balanced Protocol = "balanced"
)

// Member is one live agent as it registered itself.
type Member struct {
	ID         string   // agent ID, unique in the cluster
	Protocol   Protocol // static or balanced
	Connectors []string // declared static.connectors (connector names)
	Tasks      []string // declared static.tasks (task job IDs, "<connector>-<n>")
}

// Connector is one workload definition as assignment needs it.
type Connector struct {
	Name  string // connector name; also the ID of its own job when Run is true
	Run   bool   // the connector has its own job (a [connector.run] block)
	Tasks int    // task jobs "<Name>-0" … "<Name>-<Tasks-1>"
	Group string // sharing group name, "" for none
}

// Input is everything the assignment depends on.
type Input struct {
	Members        []Member
	Connectors     []Connector
	Previous       Assignment           // the last published assignment (zero value: none)
	LastSeen       map[string]time.Time // when each member (also departed ones) was last seen live
	Now            time.Time
	RebalanceDelay time.Duration // rule 5
}

// Conflict records a job declared by more than one member (rule 4).
type Conflict struct {
	Job     string
	Members []string // sorted
	Winner  string   // lowest member ID
}

// Assignment is the result: a pure function of Input.
type Assignment struct {
	Members    map[string][]string // member ID -> sorted job IDs
	Unassigned map[string]string   // job ID -> reason
	Conflicts  []Conflict          // sorted by Job
}

// Compute applies the assignment rules of DESIGN.md to in.
func Compute(in Input) Assignment { return Assignment{} }
