package assign

import (
	"sort"

	"github.com/berthd/berth/spec"
)

// member is a live member after normalisation: one entry per ID, declared
// lists sorted and free of duplicates and empty strings.
type member struct {
	ID         string
	Static     bool
	Connectors []string
	Tasks      []string
}

// standby reports whether the member declares nothing (KIP-987: a worker
// without static.connectors and static.tasks takes the jobs nobody else
// runs). Declarations of jobs that do not exist still count: the member
// meant to run them.
func (m member) standby() bool { return len(m.Connectors) == 0 && len(m.Tasks) == 0 }

// normaliseMembers merges entries with one ID (see [Member]) and returns the
// live members sorted by ID.
func normaliseMembers(in []Member) []member {
	byID := make(map[string]*member, len(in))
	for _, m := range in {
		if m.ID == "" {
			continue
		}
		nm, ok := byID[m.ID]
		if !ok {
			nm = &member{ID: m.ID, Static: true}
			byID[m.ID] = nm
		}
		nm.Static = nm.Static && m.Protocol == spec.ProtocolStatic
		nm.Connectors = append(nm.Connectors, m.Connectors...)
		nm.Tasks = append(nm.Tasks, m.Tasks...)
	}
	out := make([]member, 0, len(byID))
	for _, m := range byID {
		m.Connectors = sortedSet(m.Connectors)
		m.Tasks = sortedSet(m.Tasks)
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// sortedSet returns ss sorted, without duplicates and empty strings.
func sortedSet(ss []string) []string {
	if len(ss) == 0 {
		return nil
	}
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	k := 0
	for i, s := range out {
		if i > 0 && s == out[k-1] {
			continue
		}
		out[k] = s
		k++
	}
	return out[:k]
}

// declarations returns, for every existing job that live members declare,
// the sorted IDs of its declarers (rules 1 and 3), and the conflicts among
// them (rule 4), sorted by job. A static.connectors entry declares the
// connector's own job only, which exists only when the connector has Run; a
// static.tasks entry declares a task job. Declarations of jobs that do not
// exist are ignored (rule 3). members must be sorted by ID.
func declarations(members []member, jobs map[string]*Job) (map[string][]string, []Conflict) {
	decl := make(map[string][]string)
	for _, m := range members {
		for _, c := range m.Connectors {
			if j, ok := jobs[c]; ok && j.Kind == spec.KindConnector {
				decl[c] = append(decl[c], m.ID)
			}
		}
		for _, t := range m.Tasks {
			if j, ok := jobs[t]; ok && j.Kind == spec.KindTask {
				decl[t] = append(decl[t], m.ID)
			}
		}
	}
	var conflicts []Conflict
	for job, ms := range decl {
		if len(ms) > 1 {
			conflicts = append(conflicts, Conflict{Job: job, Members: ms, Winner: ms[0]})
		}
	}
	sort.Slice(conflicts, func(i, j int) bool { return conflicts[i].Job < conflicts[j].Job })
	return decl, conflicts
}
