package assign

import "sort"

// diff returns the jobs each member loses and gains going from prev to next
// (member ID -> sorted job IDs; members with no change are absent). Rule 7:
// the cluster layer revokes every job in revoked — the worker stopped, its
// claim released — before the member in added may start it, so no job ever
// runs twice. A job that moves from Unassigned to a member is only added; a
// member absent from next loses all its prev jobs.
func diff(prev, next Assignment) (revoked, added map[string][]string) {
	return minus(prev.Members, next.Members), minus(next.Members, prev.Members)
}

// minus returns, per member, the jobs in a that are not in b.
func minus(a, b map[string][]string) map[string][]string {
	out := make(map[string][]string)
	for m, jobs := range a {
		have := make(map[string]bool, len(b[m]))
		for _, j := range b[m] {
			have[j] = true
		}
		var d []string
		for _, j := range jobs {
			if !have[j] {
				d = append(d, j)
				have[j] = true // report duplicates once
			}
		}
		if len(d) > 0 {
			sort.Strings(d)
			out[m] = d
		}
	}
	return out
}
