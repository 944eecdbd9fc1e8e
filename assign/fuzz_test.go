package assign

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/berthd/berth/spec"
)

// FuzzCompute feeds Compute inputs decoded from the fuzzer's bytes
// (fuzzInput): members with any protocol, empty and repeated IDs,
// declarations of jobs that do not exist, connectors with repeated or
// empty names, negative task counts and sharing groups, a previous
// assignment naming departed members, rule 5 holds. Whatever the input,
// Compute must not panic or change its input, and must keep the promises
// of Assignment: every job of the workload exactly once, under a live
// member or in Unassigned with a reason; exactly the live members in
// Members, each list sorted; and the same output for the same input in
// another order (members, connectors and declared lists reversed, a
// member and a connector entry repeated). The rules themselves are
// checked on generated clusters by the property tests. Seed corpus:
// testdata/fuzz/FuzzCompute.
func FuzzCompute(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 0, 1, 3, 2, 1, 0, 4, 0, 3, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 0, 2, 2, 0, 0, 1, 2, 0, 0, 3, 0, 0, 4, 1, 0, 9, 0, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzInput(&fuzzBytes{b: data})
		before := deepCopy(in)
		out := Compute(in)
		if !reflect.DeepEqual(in, before) {
			t.Fatalf("Compute changed its input:\n got %+v\nwant %+v", in, before)
		}
		checkPlaced(t, in, out)
		if got := Compute(reordered(in)); !reflect.DeepEqual(got, out) {
			t.Fatalf("the same input in another order changed the output:\n got %+v\nwant %+v\ninput %+v", got, out, in)
		}
	})
}

// fuzzBytes hands out the fuzzer's bytes; past their end it gives zeros,
// so that every input decodes to a whole cluster.
type fuzzBytes struct{ b []byte }

func (f *fuzzBytes) next() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

// upTo returns 0..n.
func (f *fuzzBytes) upTo(n int) int { return int(f.next()) % (n + 1) }

// pick returns one of xs, or for a byte ≥ 240 a raw string of the bytes
// that follow (any text the store might hold).
func (f *fuzzBytes) pick(xs ...string) string {
	c := f.next()
	if c >= 240 {
		n := int(c - 240)
		s := make([]byte, n)
		for i := range s {
			s[i] = f.next()
		}
		return string(s)
	}
	return xs[int(c)%len(xs)]
}

var (
	fuzzMembers    = []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", ""}
	fuzzConnectors = []string{"c0", "c1", "c2", "c3", "c4", "c0-1", ""}
	fuzzGroups     = []string{"", "", "g0", "g1"}
)

// fuzzInput decodes one assignment input.
func fuzzInput(f *fuzzBytes) Input {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	in := Input{Now: t0, LastSeen: map[string]time.Time{}}
	for i, n := 0, f.upTo(8); i < n; i++ {
		in.Connectors = append(in.Connectors, Connector{Name: f.pick(fuzzConnectors...), Run: f.next()%2 == 1,
			Tasks: f.upTo(8) - 2, Group: f.pick(fuzzGroups...)})
	}
	taskIDs := func() string {
		return spec.TaskID(f.pick("c0", "c1", "c2", "c9"), f.upTo(6))
	}
	for i, n := 0, f.upTo(10); i < n; i++ {
		m := Member{ID: f.pick(fuzzMembers...), Protocol: spec.Protocol(f.pick(string(spec.ProtocolStatic), string(spec.ProtocolStatic), string(spec.ProtocolBalanced), ""))}
		for k, nk := 0, f.upTo(3); k < nk; k++ {
			m.Connectors = append(m.Connectors, f.pick(append(fuzzConnectors, "nope")...))
		}
		for k, nk := 0, f.upTo(4); k < nk; k++ {
			m.Tasks = append(m.Tasks, taskIDs())
		}
		in.Members = append(in.Members, m)
	}
	if f.next()%2 == 1 {
		owners := append([]string{"", "gone"}, fuzzMembers...)
		in.Previous = Assignment{Members: map[string][]string{}, Declared: map[string]string{}, Held: map[string]string{}, Unassigned: map[string]string{}}
		for _, j := range Jobs(in.Connectors) {
			if o := f.pick(owners...); o != "" {
				in.Previous.Members[o] = append(in.Previous.Members[o], j.ID)
			}
			if d := f.pick(owners...); d != "" {
				in.Previous.Declared[j.ID] = d
			}
			if h := f.pick(owners...); h != "" && f.next()%4 == 0 {
				in.Previous.Held[j.ID] = h
			}
		}
	}
	for _, id := range append([]string{"gone"}, fuzzMembers...) {
		if f.next()%2 == 1 {
			in.LastSeen[id] = t0.Add(-time.Duration(f.upTo(20)) * time.Second)
		}
	}
	in.RebalanceDelay = []time.Duration{0, 10 * time.Second, -time.Second}[f.upTo(2)]
	return in
}

// checkPlaced asserts what Assignment promises for any input.
func checkPlaced(t *testing.T, in Input, out Assignment) {
	t.Helper()
	if out.Members == nil || out.Unassigned == nil || out.Held == nil || out.Declared == nil {
		t.Fatalf("a nil map in %+v", out)
	}
	live := map[string]bool{}
	for _, m := range in.Members {
		if m.ID != "" {
			live[m.ID] = true
		}
	}
	if len(out.Members) != len(live) {
		t.Fatalf("Members has %d entries for the %d live members %v: %v", len(out.Members), len(live), live, out.Members)
	}
	count := map[string]int{}
	for m, js := range out.Members {
		if !live[m] {
			t.Fatalf("jobs for %q, which is not a live member", m)
		}
		if js == nil || !sort.StringsAreSorted(js) {
			t.Fatalf("jobs of %s nil or not sorted: %v", m, js)
		}
		for _, j := range js {
			count[j]++
		}
	}
	for j, why := range out.Unassigned {
		count[j]++
		if why == "" {
			t.Fatalf("job %s unassigned without a reason", j)
		}
	}
	jobs := map[string]bool{}
	for _, j := range Jobs(in.Connectors) {
		jobs[j.ID] = true
	}
	for j, n := range count {
		if !jobs[j] || n != 1 {
			t.Fatalf("job %q appears %d times (in the workload: %v)", j, n, jobs[j])
		}
	}
	if len(count) != len(jobs) {
		t.Fatalf("%d of the %d jobs placed or reported", len(count), len(jobs))
	}
	for _, c := range out.Conflicts {
		if len(c.Members) < 2 || c.Winner != c.Members[0] || !sort.StringsAreSorted(c.Members) || !jobs[c.Job] {
			t.Fatalf("conflict %+v", c)
		}
	}
}

// reordered is in with members, connectors and every declared list
// reversed, and the first member and connector entries repeated: the same
// input to Compute.
func reordered(in Input) Input {
	out := deepCopy(in)
	slices.Reverse(out.Connectors)
	if len(out.Connectors) > 0 {
		out.Connectors = append(out.Connectors, out.Connectors[0])
	}
	for i := range out.Members {
		slices.Reverse(out.Members[i].Connectors)
		slices.Reverse(out.Members[i].Tasks)
	}
	slices.Reverse(out.Members)
	if len(out.Members) > 0 {
		m := out.Members[0]
		out.Members = append(out.Members, Member{ID: m.ID, Protocol: m.Protocol, Tasks: slices.Clone(m.Tasks)})
	}
	return out
}

// deepCopy copies every slice and map of in.
func deepCopy(in Input) Input {
	out := in
	out.Connectors = slices.Clone(in.Connectors)
	out.Members = nil
	for _, m := range in.Members {
		m.Connectors, m.Tasks = slices.Clone(m.Connectors), slices.Clone(m.Tasks)
		out.Members = append(out.Members, m)
	}
	if in.Members != nil && out.Members == nil {
		out.Members = []Member{}
	}
	out.LastSeen = map[string]time.Time{}
	for k, v := range in.LastSeen {
		out.LastSeen[k] = v
	}
	if in.LastSeen == nil {
		out.LastSeen = nil
	}
	out.Previous = copyAssignment(in.Previous)
	return out
}

func copyAssignment(a Assignment) Assignment {
	cp := func(m map[string]string) map[string]string {
		if m == nil {
			return nil
		}
		out := make(map[string]string, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	out := Assignment{Unassigned: cp(a.Unassigned), Held: cp(a.Held), Declared: cp(a.Declared), Conflicts: slices.Clone(a.Conflicts)}
	if a.Members != nil {
		out.Members = make(map[string][]string, len(a.Members))
		for k, v := range a.Members {
			out.Members[k] = slices.Clone(v)
		}
	}
	return out
}

// The decoder reaches every shape it is meant to: a cluster decoded from
// a few bytes has connectors, members with declarations and a previous
// assignment.
func TestFuzzInputDecodes(t *testing.T) {
	in := fuzzInput(&fuzzBytes{b: []byte{2, 0, 1, 3, 2, 1, 0, 4, 0, 3, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 0, 2, 2, 0, 0, 1, 2, 0, 0, 3, 0, 0, 4, 1, 0, 9, 0, 1, 1}})
	if len(in.Connectors) != 2 || len(in.Members) != 3 || len(in.Members[0].Connectors) != 1 || in.Previous.Members == nil {
		t.Fatalf("decoded %s", fmt.Sprintf("%+v", in))
	}
}
