package cluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster/store"
)

// offline is a Client for planning only: its key layout and size limits,
// no etcd connection.
func offline(maxTxnOps, maxRequestBytes int) *Client {
	return &Client{cfg: Config{Name: "t", MaxTxnOps: maxTxnOps, MaxRequestBytes: maxRequestBytes}, keys: store.NewKeys("t")}
}

// plainShare is the share content of jobs with no definition revisions.
func plainShare(jobs []string) shareContent {
	sc := shareContent{jobs: slices.Sorted(slices.Values(jobs)), connectors: map[string]int64{}, groups: map[string]int64{}}
	if sc.jobs == nil {
		sc.jobs = []string{}
	}
	return sc
}

// opString is "put <key>" or "delete <key>" ("delete <key>*" for a prefix).
func opString(o sizedOp) string {
	k := string(o.op.KeyBytes())
	switch {
	case o.op.IsPut():
		return "put " + k
	case o.op.IsDelete() && len(o.op.RangeBytes()) > 0:
		return "delete " + k + "*"
	default:
		return "delete " + k
	}
}

func opStrings(ops []sizedOp) []string {
	out := []string{}
	for _, o := range ops {
		out = append(out, opString(o))
	}
	return out
}

// The pure plan of a publication: which shares, buckets, tombstones, the
// single-key value and the head each transition writes, and in which phase.
func TestPlanPublication(t *testing.T) {
	c := offline(DefaultMaxTxnOps, DefaultMaxRequestBytes)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	// plan publishes a over prev (nil: nothing stored yet, forced).
	plan := func(t *testing.T, prev *pubState, a assign.Assignment, old bool) (pubPlan, bool) {
		t.Helper()
		in := pubInput{assignment: a, leader: "l", shareOf: plainShare, oldMembers: old, now: now}
		if prev == nil {
			in.prev = pubState{force: true}
		} else {
			in.prev = *prev
		}
		p, ok, err := planPublication(c, in)
		if err != nil {
			t.Fatal(err)
		}
		return p, ok
	}
	members := func(m map[string][]string) assign.Assignment { return assign.Assignment{Members: m} }
	ab := members(map[string][]string{"a": {"x-0", "x-1"}, "b": {"x-2"}})
	after := func(t *testing.T, a assign.Assignment) *pubState {
		p, ok := plan(t, nil, a, false)
		if !ok {
			t.Fatal("first publication planned nothing")
		}
		return &p.next
	}
	head := "put /berth/t/pub/head"

	type phases struct{ first, gaining, cleanup, status, tail []string }
	cases := []struct {
		name  string
		prev  func(t *testing.T) *pubState
		a     assign.Assignment
		old   bool
		ok    bool
		want  phases
		gains map[string]string // job -> member handed out
	}{
		{
			name: "first publication: every share gains, head last",
			prev: func(*testing.T) *pubState { return nil },
			a:    ab, ok: true,
			want:  phases{gaining: []string{"put /berth/t/pub/shares/a/0000", "put /berth/t/pub/shares/b/0000"}, tail: []string{head}},
			gains: map[string]string{"x-0": "a", "x-1": "a", "x-2": "b"},
		},
		{
			name: "same assignment again: nothing to publish",
			prev: func(t *testing.T) *pubState { return after(t, ab) },
			a:    ab, ok: false,
		},
		{
			name: "forced with no change: the head alone",
			prev: func(t *testing.T) *pubState { p := after(t, ab); p.force = true; return p },
			a:    ab, ok: true,
			want: phases{tail: []string{head}},
		},
		{
			name: "a job moves: the loser first, the gainer in a wave",
			prev: func(t *testing.T) *pubState { return after(t, ab) },
			a:    members(map[string][]string{"a": {"x-0"}, "b": {"x-1", "x-2"}}), ok: true,
			want:  phases{first: []string{"put /berth/t/pub/shares/a/0000"}, gaining: []string{"put /berth/t/pub/shares/b/0000"}, tail: []string{head}},
			gains: map[string]string{"x-1": "b"},
		},
		{
			name: "a member leaves: its tombstone first",
			prev: func(t *testing.T) *pubState { return after(t, ab) },
			a:    members(map[string][]string{"a": {"x-0", "x-1", "x-2"}}), ok: true,
			want:  phases{first: []string{"put /berth/t/pub/shares/b/0000"}, gaining: []string{"put /berth/t/pub/shares/a/0000"}, tail: []string{head}},
			gains: map[string]string{"x-2": "a"},
		},
		{
			name: "a tombstone is deleted with the next change, not on its own",
			prev: func(t *testing.T) *pubState {
				p, _ := plan(t, after(t, ab), members(map[string][]string{"a": {"x-0", "x-1", "x-2"}}), false)
				return &p.next
			},
			a: members(map[string][]string{"a": {"x-0", "x-1", "x-2"}}), ok: false,
		},
		{
			name: "a tombstone is deleted with the next change",
			prev: func(t *testing.T) *pubState {
				p, _ := plan(t, after(t, ab), members(map[string][]string{"a": {"x-0", "x-1", "x-2"}}), false)
				return &p.next
			},
			a: members(map[string][]string{"a": {"x-0", "x-1"}}), ok: true,
			want: phases{first: []string{"put /berth/t/pub/shares/a/0000"}, cleanup: []string{"delete /berth/t/pub/shares/b/*"},
				tail: []string{head}},
		},
		{
			name: "an unassigned job: its status bucket, then gone again",
			prev: func(t *testing.T) *pubState {
				p, _ := plan(t, after(t, ab), assign.Assignment{Members: map[string][]string{"a": {"x-0", "x-1"}, "b": {"x-2"}},
					Unassigned: map[string]string{"x-3": "no member"}}, false)
				return &p.next
			},
			a: ab, ok: true,
			want: phases{status: []string{"delete /berth/t/pub/status/" + bucketOf("x-3")}, tail: []string{head}},
		},
		{
			name: "an agent of the single-key layout is a member: its key before the head",
			prev: func(t *testing.T) *pubState { return after(t, ab) },
			a:    members(map[string][]string{"a": {"x-0", "x-1"}, "b": {"x-2"}, "c": {}}), old: true, ok: true,
			want: phases{first: []string{"put /berth/t/pub/shares/c/0000"}, tail: []string{"put /berth/t/assignment", head}},
		},
		{
			name: "no agent of the single-key layout left: its key deleted",
			prev: func(t *testing.T) *pubState { p := after(t, ab); p.legacy = true; return p },
			a:    members(map[string][]string{"a": {"x-0", "x-1"}, "b": {"x-2"}, "c": {}}), ok: true,
			want: phases{first: []string{"put /berth/t/pub/shares/c/0000"}, tail: []string{"delete /berth/t/assignment", head}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prev := tc.prev(t)
			p, ok := plan(t, prev, tc.a, tc.old)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			var gaining []string
			gains := map[string]string{}
			for _, g := range p.gaining {
				gaining = append(gaining, opStrings(g.ops)...)
				for j, m := range g.jobs {
					gains[j] = m
				}
			}
			got := phases{opStrings(p.first), gaining, opStrings(p.cleanup), opStrings(p.status), opStrings(p.tail)}
			for _, ph := range []struct {
				name      string
				got, want []string
			}{{"first", got.first, tc.want.first}, {"gaining", got.gaining, tc.want.gaining},
				{"cleanup", got.cleanup, tc.want.cleanup}, {"status", got.status, tc.want.status}, {"tail", got.tail, tc.want.tail}} {
				if len(ph.got) == 0 && len(ph.want) == 0 {
					continue
				}
				if !slices.Equal(ph.got, ph.want) {
					t.Errorf("%s = %q, want %q", ph.name, ph.got, ph.want)
				}
			}
			if len(gains) > 0 || len(tc.gains) > 0 {
				if fmt.Sprint(gains) != fmt.Sprint(tc.gains) {
					t.Errorf("jobs handed out = %v, want %v", gains, tc.gains)
				}
			}
			wantGen := int64(1)
			if prev != nil {
				wantGen = prev.generation + 1
			}
			var h Head
			last := p.tail[len(p.tail)-1]
			if err := json.Unmarshal(last.op.ValueBytes(), &h); err != nil {
				t.Fatal(err)
			}
			jobs := 0
			for _, js := range tc.a.Members {
				jobs += len(js)
			}
			if h.Generation != wantGen || h.Leader != "l" || h.Members != len(tc.a.Members) || h.Jobs != jobs || !h.Published.Equal(now) {
				t.Errorf("head = %+v, want generation %d of %d members, %d jobs", h, wantGen, len(tc.a.Members), jobs)
			}
			if p.next.generation != wantGen || len(p.next.shares) == 0 {
				t.Errorf("state after = generation %d, %d shares", p.next.generation, len(p.next.shares))
			}
		})
	}
}

// A change of a definition revision rewrites the share although its jobs
// stay: in the first phase, handing out nothing.
func TestPlanRewritesShareOnDefinitionRevision(t *testing.T) {
	c := offline(DefaultMaxTxnOps, DefaultMaxRequestBytes)
	rev := int64(5)
	shareOf := func(jobs []string) shareContent {
		sc := plainShare(jobs)
		sc.connectors["x"] = rev
		return sc
	}
	a := assign.Assignment{Members: map[string][]string{"a": {"x-0"}}}
	p1, _, err := planPublication(c, pubInput{prev: pubState{force: true}, assignment: a, leader: "l", shareOf: shareOf})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := planPublication(c, pubInput{prev: p1.next, assignment: a, leader: "l", shareOf: shareOf}); ok {
		t.Fatal("same revision planned a publication")
	}
	rev = 6
	p2, ok, err := planPublication(c, pubInput{prev: p1.next, assignment: a, leader: "l", shareOf: shareOf})
	if err != nil || !ok {
		t.Fatalf("new revision: ok %v, %v", ok, err)
	}
	if got := opStrings(p2.first); !slices.Equal(got, []string{"put /berth/t/pub/shares/a/0000"}) || len(p2.gaining) != 0 {
		t.Fatalf("first = %q, %d gaining; want a's share first, no gains", got, len(p2.gaining))
	}
}

// A share too large for one chunk is split; when it shrinks, the chunks it
// no longer needs are deleted in the same phase. Every chunk, and every
// transaction pack makes of the plan, stays within etcd's limits.
func TestPlanChunksWithinLimits(t *testing.T) {
	const maxOps, maxBytes = 8, 16 * 1024
	c := offline(maxOps, maxBytes)
	var many []string
	for i := range 3000 {
		many = append(many, fmt.Sprintf("connector-with-a-long-name-%04d", i))
	}
	p1, ok, err := planPublication(c, pubInput{prev: pubState{force: true}, leader: "l", shareOf: plainShare,
		assignment: assign.Assignment{Members: map[string][]string{"a": many, "b": many[:1]}}})
	if err != nil || !ok {
		t.Fatalf("ok %v, %v", ok, err)
	}
	chunks := p1.next.shares["a"].chunks
	if chunks < 10 {
		t.Fatalf("3000 jobs in %d chunks of at most %d bytes", chunks, c.chunkBytes())
	}
	all := p1.all()
	for _, o := range all {
		if o.size > c.chunkBytes()+256 && !strings.HasSuffix(string(o.op.KeyBytes()), "head") {
			t.Errorf("%s: %d bytes, over the chunk size %d", opString(o), o.size, c.chunkBytes())
		}
	}
	checkPacked(t, c, all, maxOps)

	p2, ok, err := planPublication(c, pubInput{prev: p1.next, leader: "l", shareOf: plainShare,
		assignment: assign.Assignment{Members: map[string][]string{"a": many[:1], "b": many[1:2]}}})
	if err != nil || !ok {
		t.Fatalf("ok %v, %v", ok, err)
	}
	var deleted []string
	for _, o := range p2.first {
		if o.op.IsDelete() {
			deleted = append(deleted, string(o.op.KeyBytes()))
		}
	}
	if len(deleted) != chunks-1 || deleted[0] != c.keys.ShareChunk("a", 1) {
		t.Fatalf("shrunk share deletes %q, want chunks 1…%d of a", deleted, chunks-1)
	}
	checkPacked(t, c, p2.all(), maxOps)
}

// checkPacked fails unless pack keeps ops, in order, in transactions of at
// most maxOps operations and the request budget.
func checkPacked(t *testing.T, c *Client, ops []sizedOp, maxOps int) {
	t.Helper()
	txns := c.pack(ops, maxOps)
	n := 0
	for i, txn := range txns {
		if len(txn) > maxOps {
			t.Errorf("transaction %d: %d operations, over %d", i, len(txn), maxOps)
		}
		bytes := 0
		for _, op := range txn {
			if string(op.KeyBytes()) != string(ops[n].op.KeyBytes()) {
				t.Fatalf("transaction %d: operation %d out of order", i, n)
			}
			bytes += ops[n].size
			n++
		}
		if bytes > c.requestBudget() {
			t.Errorf("transaction %d: %d bytes, over the budget %d", i, bytes, c.requestBudget())
		}
	}
	if n != len(ops) {
		t.Fatalf("packed %d of %d operations", n, len(ops))
	}
}
