package assign

import (
	"fmt"
	"sort"
	"time"
)

// previousOwners maps every job of the previous assignment to the member it
// belonged to: its member in prev.Members (the lowest member ID if a
// malformed assignment lists it twice), else the departed member that
// prev.Held kept it for.
func previousOwners(prev Assignment) map[string]string {
	ids := make([]string, 0, len(prev.Members))
	n := len(prev.Held)
	for id, jobs := range prev.Members {
		ids = append(ids, id)
		n += len(jobs)
	}
	sort.Strings(ids)
	owner := make(map[string]string, n)
	for _, id := range ids {
		for _, j := range prev.Members[id] {
			if _, ok := owner[j]; !ok {
				owner[j] = id
			}
		}
	}
	for j, id := range prev.Held {
		if _, ok := owner[j]; !ok {
			owner[j] = id
		}
	}
	return owner
}

// hold is a departed member's claim on its jobs under rule 5.
type hold struct {
	member string
	until  time.Time
}

// reason is the Unassigned text for a held job.
func (h hold) reason() string {
	return fmt.Sprintf("held for member %s until %s", h.member, h.until.UTC().Format(time.RFC3339))
}

// holds returns, for each departed member — one that owned jobs in the
// previous assignment (see previousOwners) and is not live now — whose
// hold has not ended, the hold on its jobs (rule 5). A hold ends at
// LastSeen[member] + RebalanceDelay (Connect's
// scheduled.rebalance.max.delay.ms, KIP-415); with a delay ≤ 0, or no
// LastSeen entry, there is none.
func holds(in Input, owners map[string]string, live map[string]bool) map[string]hold {
	out := make(map[string]hold)
	if in.RebalanceDelay <= 0 {
		return out
	}
	for _, m := range owners {
		if live[m] {
			continue
		}
		if _, done := out[m]; done {
			continue
		}
		seen, ok := in.LastSeen[m]
		if !ok {
			continue
		}
		if until := seen.Add(in.RebalanceDelay); in.Now.Before(until) {
			out[m] = hold{member: m, until: until}
		}
	}
	return out
}
