package assign

import (
	"container/heap"
	"sort"
)

// unit is what balanced placement moves: one ungrouped job, or all the jobs
// of one sharing group that are being balanced (rule 6).
type unit struct {
	jobs []string // sorted job IDs; jobs[0] is the unit's key
	prev int      // index of the member it stays on, -1 if none
}

func (u *unit) size() int   { return len(u.jobs) }
func (u *unit) key() string { return u.jobs[0] }

// makeUnits groups jobs into units — a sharing group's jobs form one unit,
// every ungrouped job is a unit of its own — and gives each unit the member
// (an index into members) it stays on: the member among members that ran
// most of its jobs in the previous assignment, the lowest ID on a tie (rule
// 6: a group stays where the majority of its jobs were). jobs must be sorted
// by ID, members by ID. The units are sorted by key.
func makeUnits(jobs []*Job, members []string, prevOwner map[string]string) []*unit {
	idx := make(map[string]int, len(members))
	for i, m := range members {
		idx[m] = i
	}
	var units []*unit
	groups := make(map[string]*unit)
	for _, j := range jobs {
		if j.Group == "" {
			units = append(units, &unit{jobs: []string{j.ID}})
			continue
		}
		u, ok := groups[j.Group]
		if !ok {
			u = &unit{}
			groups[j.Group] = u
			units = append(units, u)
		}
		u.jobs = append(u.jobs, j.ID)
	}
	for _, u := range units {
		u.prev = -1
		best := 0
		var votes map[int]int
		for _, id := range u.jobs {
			p, ok := idx[prevOwner[id]]
			if !ok {
				continue
			}
			if len(u.jobs) == 1 {
				u.prev = p
				break
			}
			if votes == nil {
				votes = make(map[int]int)
			}
			votes[p]++
			if n := votes[p]; n > best || (n == best && p < u.prev) {
				best, u.prev = n, p
			}
		}
	}
	// Units were appended in order of their first job, which is their key.
	return units
}

// balance places units on members (sorted IDs, at least one) and returns
// each member's units by index. It is Connect's incremental cooperative
// assignment (KIP-415) with units of several jobs:
//
//  1. a unit stays on its previous member;
//  2. units without one go, largest first, to the member with the fewest
//     jobs (lowest ID on a tie);
//  3. while some unit of size s sits on a member with load L and
//     0 < s < L − minLoad, one such unit moves to the least-loaded member:
//     from the most-loaded member that has one, the unit that brings the two
//     loads closest together (smaller units, then lower keys, first).
//
// Each step 3 move strictly lowers the sum of squared loads, so it ends; at
// the end no single unit move narrows any pair of loads. With units of size
// 1 this means max − min ≤ 1 jobs, reached with the fewest moves; in general
// max − min ≤ the smallest unit on the most-loaded member (≤ the largest
// unit). The true minimum with groups is multiway number partitioning
// (NP-hard); this is the single-move local optimum.
func balance(units []*unit, members []string) [][]*unit {
	n := len(members)
	placed := make([][]*unit, n)
	loads := make([]int, n)
	var free []*unit
	for _, u := range units {
		if u.prev >= 0 {
			placed[u.prev] = append(placed[u.prev], u)
			loads[u.prev] += u.size()
		} else {
			free = append(free, u)
		}
	}

	// Step 2: largest first onto the least-loaded member.
	sort.SliceStable(free, func(i, j int) bool { return free[i].size() > free[j].size() })
	if len(free) > 0 {
		h := &loadHeap{loads: loads, idx: make([]int, n)}
		for i := range h.idx {
			h.idx[i] = i
		}
		heap.Init(h)
		for _, u := range free {
			m := h.idx[0]
			placed[m] = append(placed[m], u)
			loads[m] += u.size()
			heap.Fix(h, 0)
		}
	}

	// Step 3: move units from heavy to light members while that helps. Each
	// member's units are kept sorted by (size, key), so the smallest is first
	// and the best unit to move is found by binary search.
	for _, us := range placed {
		sort.Slice(us, func(i, j int) bool { return less(us[i], us[j]) })
	}
	for {
		lo := 0
		for m := 1; m < n; m++ {
			if loads[m] < loads[lo] {
				lo = m
			}
		}
		hi := -1
		for m := 0; m < n; m++ {
			if len(placed[m]) > 0 && placed[m][0].size() < loads[m]-loads[lo] && (hi < 0 || loads[m] > loads[hi]) {
				hi = m
			}
		}
		if hi < 0 {
			return placed
		}
		i := pick(placed[hi], loads[hi]-loads[lo])
		u := placed[hi][i]
		placed[hi] = append(placed[hi][:i], placed[hi][i+1:]...)
		loads[hi] -= u.size()
		j := sort.Search(len(placed[lo]), func(k int) bool { return less(u, placed[lo][k]) })
		placed[lo] = append(placed[lo], nil)
		copy(placed[lo][j+1:], placed[lo][j:])
		placed[lo][j] = u
		loads[lo] += u.size()
	}
}

// less orders units by size, then key.
func less(a, b *unit) bool {
	if a.size() != b.size() {
		return a.size() < b.size()
	}
	return a.key() < b.key()
}

// pick returns the index in us (sorted by less; us[0].size() < d) of the
// unit whose move across a load difference d leaves the two loads closest,
// |d − 2·size| smallest; on a tie the smaller unit, then the lower key.
func pick(us []*unit, d int) int {
	// a: the first unit of the largest size ≤ d/2; b: the first unit of the
	// smallest size > d/2, if that size is < d.
	above := sort.Search(len(us), func(k int) bool { return us[k].size() > d/2 })
	a, b := -1, -1
	if above > 0 {
		s := us[above-1].size()
		a = sort.Search(above, func(k int) bool { return us[k].size() >= s })
	}
	if above < len(us) && us[above].size() < d {
		b = above
	}
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	case abs(d-2*us[b].size()) < abs(d-2*us[a].size()):
		return b
	default:
		return a
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// loadHeap orders member indices by load, then by index (= ID order).
type loadHeap struct {
	loads []int
	idx   []int
}

func (h *loadHeap) Len() int { return len(h.idx) }
func (h *loadHeap) Less(i, j int) bool {
	a, b := h.idx[i], h.idx[j]
	if h.loads[a] != h.loads[b] {
		return h.loads[a] < h.loads[b]
	}
	return a < b
}
func (h *loadHeap) Swap(i, j int) { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *loadHeap) Push(any)      { panic("loadHeap: fixed size") }
func (h *loadHeap) Pop() any      { panic("loadHeap: fixed size") }
