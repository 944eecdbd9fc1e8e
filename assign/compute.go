package assign

import "sort"

// Reasons a job runs nowhere, as they appear in Assignment.Unassigned (rule 5
// reasons are built by hold.reason).
const (
	reasonNoLiveMember = "no live member"
	reasonNobody       = "declared by nobody; no standby"
)

func reasonAbsent(member string) string {
	return "declared by absent member " + member + "; no standby"
}

// Compute applies the assignment rules of docs/design.md to in and returns the
// assignment. It never fails and does not modify in.
//
//   - Rule 5 first: a job whose previous owner has departed is held
//     unassigned while that member's hold lasts (see Input.RebalanceDelay).
//   - When every live member speaks Static (rule 1): a declared job goes to
//     its live declarer, the lowest member ID when several declare it (rule
//     4); the other jobs are balanced over the standbys (members that declare
//     nothing), or stay unassigned when there is none.
//   - Otherwise (rule 2): declarations are ignored and every job is balanced
//     over all live members.
//
// Balanced placement works on units (a sharing group's jobs, or one
// ungrouped job; rule 6), keeps a unit where it was, and moves units only
// while that narrows the spread of job counts; see balance for the bound.
func Compute(in Input) Assignment {
	jobs := Jobs(in.Connectors)
	byID := make(map[string]*Job, len(jobs))
	for i := range jobs {
		byID[jobs[i].ID] = &jobs[i]
	}
	members := normaliseMembers(in.Members)
	live := make(map[string]bool, len(members))
	static := len(members) > 0
	for _, m := range members {
		live[m.ID] = true
		static = static && m.Static
	}
	owners := previousOwners(in.Previous)
	held := holds(in, owners, live)
	decl, conflicts := declarations(members, byID)

	out := Assignment{
		Members:    make(map[string][]string, len(members)),
		Unassigned: make(map[string]string),
		Conflicts:  conflicts,
		Held:       make(map[string]string),
		Declared:   make(map[string]string),
	}
	for _, m := range members {
		out.Members[m.ID] = []string{}
	}

	var free []*Job
	for i := range jobs {
		j := &jobs[i]
		if ds := decl[j.ID]; len(ds) > 0 {
			out.Declared[j.ID] = ds[0]
		} else if d := in.Previous.Declared[j.ID]; d != "" && !live[d] {
			out.Declared[j.ID] = d
		}
		if h, ok := held[owners[j.ID]]; ok {
			out.Unassigned[j.ID] = h.reason()
			out.Held[j.ID] = h.member
			continue
		}
		switch {
		case len(members) == 0:
			out.Unassigned[j.ID] = reasonNoLiveMember
		case static && len(decl[j.ID]) > 0:
			w := decl[j.ID][0]
			out.Members[w] = append(out.Members[w], j.ID)
		default:
			free = append(free, j)
		}
	}

	var pool []string // members that take part in balanced placement
	for _, m := range members {
		if !static || m.standby() {
			pool = append(pool, m.ID)
		}
	}
	if len(pool) == 0 {
		for _, j := range free {
			if d, ok := out.Declared[j.ID]; ok {
				out.Unassigned[j.ID] = reasonAbsent(d)
			} else {
				out.Unassigned[j.ID] = reasonNobody
			}
		}
	} else if len(free) > 0 {
		placed := balance(makeUnits(free, pool, owners), pool)
		for m, us := range placed {
			for _, u := range us {
				out.Members[pool[m]] = append(out.Members[pool[m]], u.jobs...)
			}
		}
	}
	for _, js := range out.Members {
		sort.Strings(js)
	}
	return out
}
