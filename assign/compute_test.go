package assign

import (
	"reflect"
	"testing"
	"time"

	"github.com/berthd/berth/spec"
)

func st(id string, connectors, tasks []string) Member {
	return Member{ID: id, Protocol: spec.ProtocolStatic, Connectors: connectors, Tasks: tasks}
}

func bal(id string) Member { return Member{ID: id, Protocol: spec.ProtocolBalanced} }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// caseIO is one table row: the input and the parts of the output it pins.
type caseIO struct {
	name       string
	in         Input
	members    map[string][]string // want Assignment.Members
	unassigned map[string]string   // want Assignment.Unassigned (nil: none)
	conflicts  []Conflict          // want Assignment.Conflicts
	held       map[string]string   // want Assignment.Held (nil: none)
}

func runCases(t *testing.T, cases []caseIO) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Compute(c.in)
			if !reflect.DeepEqual(got.Members, c.members) {
				t.Errorf("Members = %v, want %v", got.Members, c.members)
			}
			if want := orEmpty(c.unassigned); !reflect.DeepEqual(got.Unassigned, want) {
				t.Errorf("Unassigned = %v, want %v", got.Unassigned, want)
			}
			if !reflect.DeepEqual(got.Conflicts, c.conflicts) {
				t.Errorf("Conflicts = %+v, want %+v", got.Conflicts, c.conflicts)
			}
			if want := orEmpty(c.held); !reflect.DeepEqual(got.Held, want) {
				t.Errorf("Held = %v, want %v", got.Held, want)
			}
		})
	}
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func TestRule1AllStatic(t *testing.T) {
	ab := []Connector{{Name: "a", Run: true, Tasks: 2}, {Name: "b", Tasks: 2}}
	runCases(t, []caseIO{
		{
			name: "declared jobs go to their declarer; connector name declares the connector job only",
			in: Input{Connectors: ab, Members: []Member{
				st("m1", []string{"a"}, []string{"b-1"}),
				st("m2", nil, []string{"a-0", "a-1", "b-0"}),
			}},
			members: map[string][]string{"m1": {"a", "b-1"}, "m2": {"a-0", "a-1", "b-0"}},
		},
		{
			name:    "undeclared jobs without a standby stay unassigned",
			in:      Input{Connectors: ab, Members: []Member{st("m1", []string{"a"}, nil)}},
			members: map[string][]string{"m1": {"a"}},
			unassigned: map[string]string{
				"a-0": "declared by nobody; no standby", "a-1": "declared by nobody; no standby",
				"b-0": "declared by nobody; no standby", "b-1": "declared by nobody; no standby",
			},
		},
		{
			name:    "a standby takes undeclared jobs, balanced by count over standbys",
			in:      Input{Connectors: ab, Members: []Member{st("m1", []string{"a"}, nil), st("s1", nil, nil), st("s2", nil, nil)}},
			members: map[string][]string{"m1": {"a"}, "s1": {"a-0", "b-0"}, "s2": {"a-1", "b-1"}},
		},
		{
			name: "standby placement is stable: the previous standby keeps its jobs",
			in: Input{Connectors: ab, Members: []Member{st("m1", []string{"a"}, nil), st("s1", nil, nil), st("s2", nil, nil)},
				Previous: Assignment{Members: map[string][]string{"s2": {"a-0", "b-0"}, "s1": {"a-1", "b-1"}}}},
			members: map[string][]string{"m1": {"a"}, "s1": {"a-1", "b-1"}, "s2": {"a-0", "b-0"}},
		},
		{
			name: "jobs of an absent declarer go to a standby",
			in: Input{Connectors: ab, Members: []Member{st("m1", []string{"a"}, nil), st("s1", nil, nil)},
				Previous: Assignment{Members: map[string][]string{"m1": {"a"}, "m2": {"b-0", "b-1"}},
					Declared: map[string]string{"a": "m1", "b-0": "m2", "b-1": "m2"}}},
			members: map[string][]string{"m1": {"a"}, "s1": {"a-0", "a-1", "b-0", "b-1"}},
		},
		{
			name: "jobs of an absent declarer without a standby: reason names it",
			in: Input{Connectors: ab, Members: []Member{st("m1", []string{"a"}, []string{"a-0", "a-1"})},
				Previous: Assignment{Members: map[string][]string{"m1": {"a", "a-0", "a-1"}, "m2": {"b-0", "b-1"}},
					Declared: map[string]string{"a": "m1", "a-0": "m1", "a-1": "m1", "b-0": "m2", "b-1": "m2"}}},
			members: map[string][]string{"m1": {"a", "a-0", "a-1"}},
			unassigned: map[string]string{
				"b-0": "declared by absent member m2; no standby", "b-1": "declared by absent member m2; no standby",
			},
		},
		{
			name: "a returning declarer gets its jobs back from the standby",
			in: Input{Connectors: ab, Members: []Member{st("m2", nil, []string{"b-0", "b-1"}), st("s1", nil, nil)},
				Previous: Assignment{Members: map[string][]string{"s1": {"a", "a-0", "a-1", "b-0", "b-1"}},
					Declared: map[string]string{"b-0": "m2", "b-1": "m2"}}},
			members: map[string][]string{"m2": {"b-0", "b-1"}, "s1": {"a", "a-0", "a-1"}},
		},
		{
			name:    "one member alone, declaring nothing, runs everything",
			in:      Input{Connectors: ab, Members: []Member{st("solo", nil, nil)}},
			members: map[string][]string{"solo": {"a", "a-0", "a-1", "b-0", "b-1"}},
		},
	})
}

func TestRule1DeclaredCarriesAbsentDeclarer(t *testing.T) {
	cs := []Connector{{Name: "b", Tasks: 1}}
	g1 := Compute(Input{Connectors: cs, Members: []Member{st("m2", nil, []string{"b-0"}), st("s", nil, nil)}})
	if g1.Declared["b-0"] != "m2" || !reflect.DeepEqual(g1.Members["m2"], []string{"b-0"}) {
		t.Fatalf("generation 1: %+v", g1)
	}
	// m2 leaves; the standby takes b-0 and the declaration is remembered.
	g2 := Compute(Input{Connectors: cs, Members: []Member{st("s", nil, nil)}, Previous: g1})
	if g2.Declared["b-0"] != "m2" || !reflect.DeepEqual(g2.Members["s"], []string{"b-0"}) {
		t.Fatalf("generation 2: %+v", g2)
	}
	// The standby leaves too, a declaring member joins: the reason still names m2.
	g3 := Compute(Input{Connectors: cs, Members: []Member{st("m3", []string{"x"}, nil)}, Previous: g2})
	if got, want := g3.Unassigned["b-0"], "declared by absent member m2; no standby"; got != want {
		t.Fatalf("generation 3: Unassigned[b-0] = %q, want %q", got, want)
	}
	// m2 is back: b-0 returns to it.
	g4 := Compute(Input{Connectors: cs, Members: []Member{st("m2", nil, []string{"b-0"}), st("m3", []string{"x"}, nil)}, Previous: g3})
	if !reflect.DeepEqual(g4.Members["m2"], []string{"b-0"}) || len(g4.Unassigned) != 0 {
		t.Fatalf("generation 4: %+v", g4)
	}
	// A live member that stops declaring a job no longer owns the declaration.
	g5 := Compute(Input{Connectors: cs, Members: []Member{st("m2", []string{"y"}, nil)}, Previous: g4})
	if _, ok := g5.Declared["b-0"]; ok || g5.Unassigned["b-0"] != "declared by nobody; no standby" {
		t.Fatalf("generation 5: %+v", g5)
	}
}

func TestRule2AnyBalancedMember(t *testing.T) {
	cs := []Connector{{Name: "a", Run: true, Tasks: 3}}
	runCases(t, []caseIO{
		{
			name: "declarations are ignored when one member speaks balanced",
			in: Input{Connectors: cs, Members: []Member{
				st("m1", []string{"a"}, []string{"a-0", "a-1", "a-2"}), bal("m2"),
			}},
			members: map[string][]string{"m1": {"a", "a-1"}, "m2": {"a-0", "a-2"}},
		},
		{
			name:    "an unknown or empty protocol counts as balanced",
			in:      Input{Connectors: cs, Members: []Member{st("m1", []string{"a"}, nil), {ID: "m2"}}},
			members: map[string][]string{"m1": {"a", "a-1"}, "m2": {"a-0", "a-2"}},
		},
		{
			name: "stable: jobs stay where they were when balance allows",
			in: Input{Connectors: cs, Members: []Member{bal("m1"), bal("m2")},
				Previous: Assignment{Members: map[string][]string{"m1": {"a-1", "a-2"}, "m2": {"a", "a-0"}}}},
			members: map[string][]string{"m1": {"a-1", "a-2"}, "m2": {"a", "a-0"}},
		},
		{
			name: "a new member takes only what balance requires",
			in: Input{Connectors: cs, Members: []Member{bal("m1"), bal("m2"), bal("m3")},
				Previous: Assignment{Members: map[string][]string{"m1": {"a-1", "a-2"}, "m2": {"a", "a-0"}}}},
			members: map[string][]string{"m1": {"a-2"}, "m2": {"a", "a-0"}, "m3": {"a-1"}},
		},
		{
			name: "a departed member's jobs go to the least loaded",
			in: Input{Connectors: cs, Members: []Member{bal("m1"), bal("m2")},
				Previous: Assignment{Members: map[string][]string{"m1": {"a", "a-0"}, "m2": {"a-1"}, "m3": {"a-2"}}}},
			members: map[string][]string{"m1": {"a", "a-0"}, "m2": {"a-1", "a-2"}},
		},
	})
}

func TestRule3NonexistentDeclarationsIgnored(t *testing.T) {
	runCases(t, []caseIO{
		{
			name: "nonexistent connector, task, and connector job without Run are ignored",
			in: Input{Connectors: []Connector{{Name: "a", Tasks: 1}}, Members: []Member{
				st("m1", []string{"a", "ghost"}, []string{"a-7", "ghost-0"}), st("s", nil, nil),
			}},
			members: map[string][]string{"m1": {}, "s": {"a-0"}},
		},
		{
			name: "static.tasks may name tasks of a connector nobody lists in static.connectors",
			in: Input{Connectors: []Connector{{Name: "a", Run: true, Tasks: 2}}, Members: []Member{
				st("m1", nil, []string{"a-1"}), st("s", nil, nil),
			}},
			members: map[string][]string{"m1": {"a-1"}, "s": {"a", "a-0"}},
		},
		{
			name: "a task ID in static.connectors does not declare the task",
			in: Input{Connectors: []Connector{{Name: "a", Tasks: 1}}, Members: []Member{
				st("m1", []string{"a-0"}, nil), st("s", nil, nil),
			}},
			members: map[string][]string{"m1": {}, "s": {"a-0"}},
		},
	})
}

func TestRule4Conflicts(t *testing.T) {
	cs := []Connector{{Name: "a", Run: true, Tasks: 1}}
	runCases(t, []caseIO{
		{
			name: "lowest member ID wins and the conflict is reported",
			in: Input{Connectors: cs, Members: []Member{
				st("m3", []string{"a"}, []string{"a-0"}), st("m1", nil, []string{"a-0"}), st("m2", []string{"a"}, []string{"a-0"}),
			}},
			members: map[string][]string{"m1": {"a-0"}, "m2": {"a"}, "m3": {}},
			conflicts: []Conflict{
				{Job: "a", Members: []string{"m2", "m3"}, Winner: "m2"},
				{Job: "a-0", Members: []string{"m1", "m2", "m3"}, Winner: "m1"},
			},
		},
		{
			name:    "a member declaring a job twice is no conflict",
			in:      Input{Connectors: cs, Members: []Member{st("m1", []string{"a", "a"}, []string{"a-0", "a-0"})}},
			members: map[string][]string{"m1": {"a", "a-0"}},
		},
		{
			name: "conflicts are reported in balanced mode too, without effect",
			in: Input{Connectors: cs, Members: []Member{
				st("m1", []string{"a"}, nil), {ID: "m2", Protocol: spec.ProtocolBalanced, Connectors: []string{"a"}},
			}},
			members:   map[string][]string{"m1": {"a"}, "m2": {"a-0"}},
			conflicts: []Conflict{{Job: "a", Members: []string{"m1", "m2"}, Winner: "m1"}},
		},
	})
}

func TestRule5RebalanceDelay(t *testing.T) {
	cs := []Connector{{Name: "a", Tasks: 2}, {Name: "b", Tasks: 1}}
	prev := Assignment{Members: map[string][]string{"m1": {"a-0", "a-1"}, "m2": {"b-0"}}}
	lastSeen := map[string]time.Time{"m1": t0, "m2": t0}
	until := "held for member m1 until 2026-11-29T12:00:10Z"
	runCases(t, []caseIO{
		{
			name: "within the delay the departed member's jobs are held",
			in: Input{Connectors: cs, Members: []Member{bal("m2")}, Previous: prev, LastSeen: lastSeen,
				Now: t0.Add(9 * time.Second), RebalanceDelay: 10 * time.Second},
			members:    map[string][]string{"m2": {"b-0"}},
			unassigned: map[string]string{"a-0": until, "a-1": until},
			held:       map[string]string{"a-0": "m1", "a-1": "m1"},
		},
		{
			name: "the hold holds even against a live static declarer",
			in: Input{Connectors: cs, Members: []Member{st("m2", nil, []string{"a-0", "b-0"})}, Previous: prev,
				LastSeen: lastSeen, Now: t0.Add(time.Second), RebalanceDelay: 10 * time.Second},
			members:    map[string][]string{"m2": {"b-0"}},
			unassigned: map[string]string{"a-0": until, "a-1": until},
			held:       map[string]string{"a-0": "m1", "a-1": "m1"},
		},
		{
			name: "at the end of the delay they are reassigned",
			in: Input{Connectors: cs, Members: []Member{bal("m2")}, Previous: prev, LastSeen: lastSeen,
				Now: t0.Add(10 * time.Second), RebalanceDelay: 10 * time.Second},
			members: map[string][]string{"m2": {"a-0", "a-1", "b-0"}},
		},
		{
			name: "with delay 0 they are reassigned at once",
			in: Input{Connectors: cs, Members: []Member{bal("m2")}, Previous: prev, LastSeen: lastSeen,
				Now: t0, RebalanceDelay: 0},
			members: map[string][]string{"m2": {"a-0", "a-1", "b-0"}},
		},
		{
			name: "without a LastSeen entry there is no hold",
			in: Input{Connectors: cs, Members: []Member{bal("m2")}, Previous: prev,
				Now: t0, RebalanceDelay: time.Hour},
			members: map[string][]string{"m2": {"a-0", "a-1", "b-0"}},
		},
		{
			name: "with no live member at all, held jobs keep their reason and the rest say so",
			in: Input{Connectors: cs, Previous: prev, LastSeen: map[string]time.Time{"m1": t0},
				Now: t0, RebalanceDelay: 10 * time.Second},
			members:    map[string][]string{},
			unassigned: map[string]string{"a-0": until, "a-1": until, "b-0": "no live member"},
			held:       map[string]string{"a-0": "m1", "a-1": "m1"},
		},
	})
}

func TestRule5HoldAcrossGenerations(t *testing.T) {
	cs := []Connector{{Name: "a", Tasks: 4}}
	in := Input{Connectors: cs, Members: []Member{bal("m1"), bal("m2")}, RebalanceDelay: 30 * time.Second, Now: t0}
	g1 := Compute(in)
	if !reflect.DeepEqual(g1.Members, map[string][]string{"m1": {"a-0", "a-2"}, "m2": {"a-1", "a-3"}}) {
		t.Fatalf("g1 = %v", g1.Members)
	}
	// m2 leaves at t0; a new member joins at t0+10s: m2's jobs are still held.
	in2 := in
	in2.Members = []Member{bal("m1"), bal("m3")}
	in2.Previous, in2.LastSeen, in2.Now = g1, map[string]time.Time{"m2": t0}, t0.Add(10*time.Second)
	g2 := Compute(in2)
	if !reflect.DeepEqual(g2.Held, map[string]string{"a-1": "m2", "a-3": "m2"}) {
		t.Fatalf("g2 held = %v", g2.Held)
	}
	if !reflect.DeepEqual(g2.Members, map[string][]string{"m1": {"a-2"}, "m3": {"a-0"}}) {
		t.Fatalf("g2 = %v", g2.Members)
	}
	// The hold survives a further generation (Previous.Held carries it) ...
	in3 := in2
	in3.Previous, in3.Now = g2, t0.Add(20*time.Second)
	if g3 := Compute(in3); !reflect.DeepEqual(g3.Held, g2.Held) {
		t.Fatalf("g3 held = %v, want %v", g3.Held, g2.Held)
	}
	// ... and m2, back within the delay, gets its jobs back.
	in4 := in3
	in4.Members = []Member{bal("m1"), bal("m2"), bal("m3")}
	g4 := Compute(in4)
	if !reflect.DeepEqual(g4.Members["m2"], []string{"a-1", "a-3"}) || len(g4.Unassigned) != 0 {
		t.Fatalf("g4 = %+v", g4)
	}
	// Had it not come back, after the delay its jobs are balanced.
	in5 := in3
	in5.Now = t0.Add(30 * time.Second)
	g5 := Compute(in5)
	if len(g5.Unassigned) != 0 || len(g5.Members["m1"]) != 2 || len(g5.Members["m3"]) != 2 {
		t.Fatalf("g5 = %+v", g5)
	}
}

func TestRule6SharingGroups(t *testing.T) {
	cs := []Connector{
		{Name: "a", Tasks: 2, Group: "g"}, {Name: "b", Tasks: 1, Group: "g"},
		{Name: "c", Tasks: 2},
	}
	runCases(t, []caseIO{
		{
			name:    "a group's jobs go to one member together, largest unit first",
			in:      Input{Connectors: cs, Members: []Member{bal("m1"), bal("m2")}},
			members: map[string][]string{"m1": {"a-0", "a-1", "b-0"}, "m2": {"c-0", "c-1"}},
		},
		{
			name: "a group stays where the majority of its jobs were",
			in: Input{Connectors: cs, Members: []Member{bal("m1"), bal("m2")},
				Previous: Assignment{Members: map[string][]string{"m1": {"a-0", "c-0", "c-1"}, "m2": {"a-1", "b-0"}}}},
			members: map[string][]string{"m1": {"c-0", "c-1"}, "m2": {"a-0", "a-1", "b-0"}},
		},
		{
			name:    "the standby share of a group is placed as one unit; declared group jobs stay with their declarer",
			in:      Input{Connectors: cs, Members: []Member{st("m1", nil, []string{"a-0"}), st("s1", nil, nil), st("s2", nil, nil)}},
			members: map[string][]string{"m1": {"a-0"}, "s1": {"a-1", "b-0"}, "s2": {"c-0", "c-1"}},
		},
		{
			name: "a group too big to split evenly is not split",
			in: Input{Connectors: []Connector{{Name: "a", Tasks: 5, Group: "g"}, {Name: "c", Tasks: 1}},
				Members: []Member{bal("m1"), bal("m2")}},
			members: map[string][]string{"m1": {"a-0", "a-1", "a-2", "a-3", "a-4"}, "m2": {"c-0"}},
		},
	})
}

func TestNoMembersNoJobs(t *testing.T) {
	got := Compute(Input{})
	want := Assignment{Members: map[string][]string{}, Unassigned: map[string]string{},
		Held: map[string]string{}, Declared: map[string]string{}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Compute(zero) = %+v, want %+v", got, want)
	}
	got = Compute(Input{Connectors: []Connector{{Name: "a", Run: true}}, Members: []Member{{ID: ""}}})
	if got.Unassigned["a"] != "no live member" {
		t.Fatalf("member with empty ID counted as live: %+v", got)
	}
}

func TestDuplicateMembersMerge(t *testing.T) {
	cs := []Connector{{Name: "a", Run: true, Tasks: 1}}
	got := Compute(Input{Connectors: cs, Members: []Member{
		st("m1", []string{"a"}, nil), st("m1", nil, []string{"a-0"}), st("s", nil, nil),
	}})
	if !reflect.DeepEqual(got.Members, map[string][]string{"m1": {"a", "a-0"}, "s": {}}) {
		t.Fatalf("static duplicates: %v", got.Members)
	}
	got = Compute(Input{Connectors: cs, Members: []Member{st("m1", []string{"a"}, nil), bal("m1"), st("m2", nil, nil)}})
	if got.Members["m2"] == nil || len(got.Members["m1"])+len(got.Members["m2"]) != 2 || len(got.Members["m2"]) != 1 {
		t.Fatalf("a duplicate entry speaking balanced must make the cluster balanced: %v", got.Members)
	}
}
