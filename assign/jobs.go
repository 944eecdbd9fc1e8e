package assign

import (
	"sort"

	"github.com/berthd/berth/spec"
)

// Job is one unit of assignment: a connector or a task.
type Job struct {
	ID        string    // job ID: the connector name, or "<connector>-<n>"
	Connector string    // name of the connector it belongs to
	Group     string    // sharing group of its connector, "" for none
	Kind      spec.Kind // spec.KindConnector or spec.KindTask
	Task      int       // task number n for a task; -1 for a connector job
}

// Jobs returns the jobs of connectors, sorted by ID: the connector job (ID =
// Name) when Run is true, and tasks spec.TaskID(Name, 0) … spec.TaskID(Name, Tasks-1).
//
// The result does not depend on the order of connectors. Connectors with an
// empty name are skipped and duplicate names resolved as [Connector] says.
// When two connectors yield the same job ID (connector "a-1" with Run, and
// task 1 of connector "a"), the job of the connector whose name sorts first
// is kept.
func Jobs(connectors []Connector) []Job {
	cs := normaliseConnectors(connectors)
	n := 0
	for _, c := range cs {
		if c.Run {
			n++
		}
		n += max(c.Tasks, 0)
	}
	jobs := make([]Job, 0, n)
	for _, c := range cs {
		if c.Run {
			jobs = append(jobs, Job{ID: c.Name, Connector: c.Name, Group: c.Group, Kind: spec.KindConnector, Task: -1})
		}
		for i := 0; i < c.Tasks; i++ {
			jobs = append(jobs, Job{ID: spec.TaskID(c.Name, i), Connector: c.Name, Group: c.Group, Kind: spec.KindTask, Task: i})
		}
	}
	sort.Slice(jobs, func(i, j int) bool {
		a, b := jobs[i], jobs[j]
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Connector < b.Connector
	})
	out := jobs[:0]
	for i, j := range jobs {
		if i > 0 && j.ID == jobs[i-1].ID {
			continue
		}
		out = append(out, j)
	}
	return out
}

// normaliseConnectors drops unnamed connectors and resolves duplicate names
// deterministically; the result is sorted by Name.
func normaliseConnectors(connectors []Connector) []Connector {
	cs := make([]Connector, 0, len(connectors))
	for _, c := range connectors {
		if c.Name != "" {
			cs = append(cs, c)
		}
	}
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		switch {
		case a.Name != b.Name:
			return a.Name < b.Name
		case a.Run != b.Run:
			return a.Run
		case a.Tasks != b.Tasks:
			return a.Tasks > b.Tasks
		default:
			return a.Group < b.Group
		}
	})
	out := cs[:0]
	for i, c := range cs {
		if i > 0 && c.Name == cs[i-1].Name {
			continue
		}
		out = append(out, c)
	}
	return out
}
