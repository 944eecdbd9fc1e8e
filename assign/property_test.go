package assign

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/spec"

	"pgregory.net/rapid"
)

// memberPool is every member ID a generated cluster uses: live members are
// drawn from it, and previous assignments also name members that are gone.
var memberPool = func() []string {
	ids := make([]string, 25)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%02d", i)
	}
	return ids
}()

// genOpts shapes a generated cluster.
type genOpts struct {
	groups   bool // connectors may have sharing groups
	balanced bool // every member speaks balanced
}

// genInput draws a random cluster: 1–20 live members with mixed protocols,
// 0–8 connectors, random declarations including conflicts and nonexistent
// jobs, a random previous assignment naming live and departed members, and
// rule 5 hold times.
func genInput(t *rapid.T, o genOpts) Input {
	nConn := rapid.IntRange(0, 8).Draw(t, "connectors")
	groupNames := []string{""}
	if o.groups {
		groupNames = []string{"", "", "g0", "g1", "g2"}
	}
	var cs []Connector
	for i := 0; i < nConn; i++ {
		cs = append(cs, Connector{
			Name:  fmt.Sprintf("c%d", i),
			Run:   rapid.Bool().Draw(t, "run"),
			Tasks: rapid.IntRange(0, 5).Draw(t, "tasks"),
			Group: rapid.SampledFrom(groupNames).Draw(t, "group"),
		})
	}
	// A duplicate name with other fields: Compute must resolve it the same
	// way whatever the order (TestPropertyOrderIndependent).
	if nConn > 0 && rapid.IntRange(0, 3).Draw(t, "conflictingDuplicate") == 0 {
		cs = append(cs, Connector{
			Name:  rapid.SampledFrom(cs).Draw(t, "dupOf").Name,
			Run:   rapid.Bool().Draw(t, "dupRun"),
			Tasks: rapid.IntRange(0, 5).Draw(t, "dupTasks"),
			Group: rapid.SampledFrom(groupNames).Draw(t, "dupGroup"),
		})
	}
	// Declarable names include connectors that do not exist (c8, c9).
	connNames := []string{"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"}
	taskIDs := rapid.Custom(func(t *rapid.T) string {
		return spec.TaskID(rapid.SampledFrom(connNames).Draw(t, "c"), rapid.IntRange(0, 6).Draw(t, "n"))
	})
	ids := rapid.Permutation(memberPool).Draw(t, "ids")[:rapid.IntRange(1, 20).Draw(t, "members")]
	allStatic := !o.balanced && rapid.Bool().Draw(t, "allStatic")
	var ms []Member
	for _, id := range ids {
		m := Member{ID: id, Protocol: spec.ProtocolStatic}
		if o.balanced || (!allStatic && rapid.Bool().Draw(t, "balanced")) {
			m.Protocol = spec.ProtocolBalanced
		}
		if !rapid.Bool().Draw(t, "standby") {
			m.Connectors = rapid.SliceOfN(rapid.SampledFrom(connNames), 0, 3).Draw(t, "declConnectors")
			m.Tasks = rapid.SliceOfN(taskIDs, 0, 4).Draw(t, "declTasks")
		}
		ms = append(ms, m)
	}
	in := Input{Members: ms, Connectors: cs, Now: t0, LastSeen: map[string]time.Time{}}
	if rapid.Bool().Draw(t, "hasPrevious") {
		prev := Assignment{Members: map[string][]string{}, Declared: map[string]string{}}
		owners := append([]string{""}, memberPool...)
		for _, j := range Jobs(cs) {
			if o := rapid.SampledFrom(owners).Draw(t, "owner"); o != "" {
				prev.Members[o] = append(prev.Members[o], j.ID)
			}
			if d := rapid.SampledFrom(owners).Draw(t, "declared"); d != "" {
				prev.Declared[j.ID] = d
			}
		}
		in.Previous = prev
	}
	for _, id := range memberPool {
		if rapid.Bool().Draw(t, "seen") {
			in.LastSeen[id] = t0.Add(-time.Duration(rapid.IntRange(0, 20).Draw(t, "ago")) * time.Second)
		}
	}
	in.RebalanceDelay = rapid.SampledFrom([]time.Duration{0, 10 * time.Second}).Draw(t, "delay")
	return in
}

// shuffled returns in with members, connectors and declared lists permuted
// and random entries duplicated; Compute must not see the difference.
func shuffled(t *rapid.T, in Input) Input {
	out := in
	out.Connectors = rapid.Permutation(in.Connectors).Draw(t, "permConnectors")
	if len(in.Connectors) > 0 && rapid.Bool().Draw(t, "dupConnector") {
		out.Connectors = append(out.Connectors, rapid.SampledFrom(in.Connectors).Draw(t, "dupC"))
	}
	var ms []Member
	for _, m := range in.Members {
		m.Connectors = rapid.Permutation(m.Connectors).Draw(t, "permC")
		m.Tasks = rapid.Permutation(m.Tasks).Draw(t, "permT")
		if len(m.Tasks) > 0 && rapid.Bool().Draw(t, "dupTask") {
			m.Tasks = append(m.Tasks, m.Tasks[0])
		}
		ms = append(ms, m)
		if rapid.IntRange(0, 4).Draw(t, "dupMember") == 0 {
			// Same ID, same protocol, a part of the declarations.
			ms = append(ms, Member{ID: m.ID, Protocol: m.Protocol, Connectors: m.Connectors[:len(m.Connectors)/2]})
		}
	}
	out.Members = rapid.Permutation(ms).Draw(t, "permMembers")
	return out
}

// view is what the checks need to know about an input.
type view struct {
	jobs      map[string]Job
	live      map[string]Member
	static    bool
	pool      []string            // members in balanced placement
	declarers map[string][]string // job -> sorted live declarers
}

func newView(in Input) view {
	v := view{jobs: map[string]Job{}, live: map[string]Member{}, static: len(in.Members) > 0, declarers: map[string][]string{}}
	for _, j := range Jobs(in.Connectors) {
		v.jobs[j.ID] = j
	}
	for _, m := range in.Members {
		v.live[m.ID] = m
		v.static = v.static && m.Protocol == spec.ProtocolStatic
		seen := map[string]bool{}
		for _, c := range m.Connectors {
			if j, ok := v.jobs[c]; ok && j.Kind == spec.KindConnector && !seen[c] {
				seen[c] = true
				v.declarers[c] = append(v.declarers[c], m.ID)
			}
		}
		for _, tk := range m.Tasks {
			if j, ok := v.jobs[tk]; ok && j.Kind == spec.KindTask && !seen[tk] {
				seen[tk] = true
				v.declarers[tk] = append(v.declarers[tk], m.ID)
			}
		}
	}
	for _, ds := range v.declarers {
		sort.Strings(ds)
	}
	for id, m := range v.live {
		if !v.static || (len(m.Connectors) == 0 && len(m.Tasks) == 0) {
			v.pool = append(v.pool, id)
		}
	}
	sort.Strings(v.pool)
	return v
}

// checkInvariants asserts the rules that hold for every input.
func checkInvariants(t *rapid.T, in Input, out Assignment) {
	v := newView(in)
	// Members holds exactly the live members, each list sorted.
	if len(out.Members) != len(v.live) {
		t.Fatalf("Members has %d entries for %d live members", len(out.Members), len(v.live))
	}
	count := map[string]int{}
	for m, js := range out.Members {
		if _, ok := v.live[m]; !ok {
			t.Fatalf("job list for member %s, which is not live", m)
		}
		if !sort.StringsAreSorted(js) {
			t.Fatalf("jobs of %s not sorted: %v", m, js)
		}
		for _, j := range js {
			count[j]++
		}
	}
	for j := range out.Unassigned {
		count[j]++
	}
	// Every job exactly once, nothing else.
	for j, n := range count {
		if _, ok := v.jobs[j]; !ok || n != 1 {
			t.Fatalf("job %s appears %d times (exists: %v)", j, n, ok)
		}
	}
	if len(count) != len(v.jobs) {
		t.Fatalf("%d of %d jobs placed or reported", len(count), len(v.jobs))
	}
	// Rule 5: held jobs, and only they, belong to a departed member whose hold lasts.
	owners := previousOwners(in.Previous)
	for id := range v.jobs {
		x := owners[id]
		_, isLive := v.live[x]
		seen, ok := in.LastSeen[x]
		want := x != "" && !isLive && ok && in.RebalanceDelay > 0 && in.Now.Before(seen.Add(in.RebalanceDelay))
		if got := out.Held[id] != ""; got != want {
			t.Fatalf("job %s held=%v, want %v (previous owner %q)", id, got, want, x)
		}
		if want && out.Held[id] != x {
			t.Fatalf("job %s held for %s, want %s", id, out.Held[id], x)
		}
		if want && !strings.HasPrefix(out.Unassigned[id], "held for member "+x+" until ") {
			t.Fatalf("job %s held with reason %q", id, out.Unassigned[id])
		}
	}
	// Unassigned only for the reasons the rules give.
	for id, r := range out.Unassigned {
		switch {
		case out.Held[id] != "":
		case len(v.live) == 0:
			if r != "no live member" {
				t.Fatalf("job %s: reason %q with no live member", id, r)
			}
		case v.static && len(v.pool) == 0:
			if r != "declared by nobody; no standby" && !strings.HasPrefix(r, "declared by absent member ") {
				t.Fatalf("job %s: reason %q", id, r)
			}
		default:
			t.Fatalf("job %s unassigned (%q) with %d members in placement", id, r, len(v.pool))
		}
	}
	// Rule 4: conflicts are the jobs with several live declarers.
	var want []Conflict
	for id, ds := range v.declarers {
		if len(ds) > 1 {
			want = append(want, Conflict{Job: id, Members: ds, Winner: ds[0]})
		}
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Job < want[j].Job })
	if !reflect.DeepEqual(out.Conflicts, want) {
		t.Fatalf("Conflicts = %+v, want %+v", out.Conflicts, want)
	}
	owner := map[string]string{}
	for m, js := range out.Members {
		for _, j := range js {
			owner[j] = m
		}
	}
	// Rule 1: all static → a declared job is on its lowest live declarer.
	if v.static {
		for id, ds := range v.declarers {
			if out.Held[id] == "" && owner[id] != ds[0] {
				t.Fatalf("declared job %s on %q, want %s (declarers %v)", id, owner[id], ds[0], ds)
			}
		}
	}
	checkBalance(t, v, out, owner)
}

// checkBalance asserts rule 6 and the balance bound on the members in
// balanced placement: a group's balanced jobs are on one member, and no
// single unit moved from one member to another would bring their job counts
// closer (a unit of size s on a, 0 < s < load(a) − load(b), does not exist).
// Without groups that is max − min ≤ 1, and 0 when the count divides evenly.
func checkBalance(t *rapid.T, v view, out Assignment, owner map[string]string) {
	if len(v.pool) == 0 {
		return
	}
	inPool := map[string]bool{}
	for _, m := range v.pool {
		inPool[m] = true
	}
	loads := map[string]int{}
	groupOn := map[string]string{}
	units := map[string]map[string]int{} // member -> unit key -> size
	total, grouped := 0, false
	for id, j := range v.jobs {
		m := owner[id]
		if !inPool[m] || (v.static && len(v.declarers[id]) > 0) {
			continue
		}
		loads[m]++
		total++
		key := id
		if j.Group != "" {
			grouped = true
			key = "group " + j.Group
			if g, ok := groupOn[j.Group]; ok && g != m {
				t.Fatalf("group %s split over %s and %s", j.Group, g, m)
			}
			groupOn[j.Group] = m
		}
		if units[m] == nil {
			units[m] = map[string]int{}
		}
		units[m][key]++
	}
	lo, hi := total, 0
	for _, a := range v.pool {
		lo, hi = min(lo, loads[a]), max(hi, loads[a])
		for _, b := range v.pool {
			d := loads[a] - loads[b]
			for key, s := range units[a] {
				if s < d {
					t.Fatalf("moving %s (%d jobs) from %s (%d) to %s (%d) would balance better", key, s, a, loads[a], b, loads[b])
				}
			}
		}
	}
	if !grouped {
		want := 0
		if total%len(v.pool) != 0 {
			want = 1
		}
		if hi-lo != want {
			t.Fatalf("ungrouped spread %d, want %d (%d jobs on %d members)", hi-lo, want, total, len(v.pool))
		}
	}
}

func TestPropertyInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t, genOpts{groups: rapid.Bool().Draw(t, "groups")})
		checkInvariants(t, in, Compute(in))
	})
}

func TestPropertyOrderIndependent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t, genOpts{groups: true})
		want := Compute(in)
		if got := Compute(shuffled(t, in)); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffled input changed the output:\n got %+v\nwant %+v", got, want)
		}
	})
}

// Feeding an assignment back as Previous with nothing else changed moves
// nothing: a stable assignment is a fixpoint, and it still obeys the rules.
func TestPropertyFixpoint(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t, genOpts{groups: true})
		first := Compute(in)
		in.Previous = first
		second := Compute(in)
		checkInvariants(t, in, second)
		if !reflect.DeepEqual(second, first) {
			t.Fatalf("recomputing from its own result changed it:\n got %+v\nwant %+v", second, first)
		}
	})
}

// Adding a member to a balanced cluster of ungrouped jobs moves at most
// ceil(N/(M+1)) jobs (N jobs, M old members), all of them to the new member.
func TestPropertyAddMemberMovesFewest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t, genOpts{balanced: true})
		in.RebalanceDelay = 0
		prev := Compute(in)
		in.Previous = prev
		in.Members = append(in.Members, bal("new"))
		next := Compute(in)
		checkInvariants(t, in, next)
		revoked, added := diff(prev, next)
		moved := 0
		for _, js := range revoked {
			moved += len(js)
		}
		for m, js := range added {
			if m != "new" {
				t.Fatalf("member %s gained %v; only the new member may gain", m, js)
			}
			if len(js) != moved {
				t.Fatalf("new member gained %d jobs, %d revoked", len(js), moved)
			}
		}
		n, m := len(Jobs(in.Connectors)), len(in.Members)
		if bound := (n + m - 1) / m; moved > bound {
			t.Fatalf("moved %d jobs, bound ceil(%d/%d) = %d", moved, n, m, bound)
		}
	})
}

// Removing a member (delay 0) moves only that member's jobs, for ungrouped
// jobs, unless the removal switches the cluster from rule 2 to rule 1 (the
// last balanced member left: then declarations take effect and jobs move to
// their declarers). With sharing groups the groups still stay together
// (checkInvariants).
func TestPropertyRemoveMemberMovesOnlyItsJobs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		groups := rapid.Bool().Draw(t, "groups")
		in := genInput(t, genOpts{groups: groups})
		in.RebalanceDelay = 0
		prev := Compute(in)
		wasStatic := newView(in).static
		i := rapid.IntRange(0, len(in.Members)-1).Draw(t, "remove")
		gone := in.Members[i].ID
		in.Previous = prev
		in.Members = append(in.Members[:i:i], in.Members[i+1:]...)
		next := Compute(in)
		checkInvariants(t, in, next)
		if groups || (!wasStatic && newView(in).static) {
			return
		}
		revoked, _ := diff(prev, next)
		for m, js := range revoked {
			if m != gone {
				t.Fatalf("member %s lost %v when %s left", m, js, gone)
			}
		}
	})
}
