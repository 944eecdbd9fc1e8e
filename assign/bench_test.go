package assign

import (
	"fmt"
	"testing"
	"time"

	"github.com/berthd/berth/spec"
)

// benchWorkload is 1,000 connectors × 10 tasks = 10,000 jobs; every tenth
// connector is in one of 50 sharing groups.
func benchWorkload() []Connector {
	cs := make([]Connector, 1000)
	for i := range cs {
		cs[i] = Connector{Name: fmt.Sprintf("conn%04d", i), Tasks: 10}
		if i%10 == 0 {
			cs[i].Group = fmt.Sprintf("group%02d", i%50)
		}
	}
	return cs
}

func benchMembers(n int, static bool) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{ID: fmt.Sprintf("agent%04d", i), Protocol: spec.ProtocolBalanced}
		if static {
			ms[i].Protocol = spec.ProtocolStatic
			// 900 members declare one connector's ten tasks each; 100 are standbys.
			if i < 900 {
				ms[i].Tasks = make([]string, 10)
				for n := range ms[i].Tasks {
					ms[i].Tasks[n] = spec.TaskID(fmt.Sprintf("conn%04d", i), n)
				}
			}
		}
	}
	return ms
}

// BenchmarkCompute measures Compute over 1,000 members × 10,000 jobs:
// a cold start (no previous assignment), a steady recompute (previous =
// result), one member joining, one leaving under a rebalance delay, all
// jobs on one member spreading out to 1,000 (the worst case for moves), and
// all members static with 100 standbys.
func BenchmarkCompute(b *testing.B) {
	cs := benchWorkload()
	cases := []struct {
		name string
		in   Input
	}{
		{"balanced/cold", Input{Members: benchMembers(1000, false), Connectors: cs}},
		{"balanced/steady", func() Input {
			in := Input{Members: benchMembers(1000, false), Connectors: cs}
			in.Previous = Compute(in)
			return in
		}()},
		{"balanced/member-joins", func() Input {
			ms := benchMembers(1000, false)
			in := Input{Members: ms[:999], Connectors: cs}
			in.Previous = Compute(in)
			in.Members = ms
			return in
		}()},
		{"balanced/member-leaves-held", func() Input {
			ms := benchMembers(1000, false)
			in := Input{Members: ms, Connectors: cs, Now: t0, RebalanceDelay: time.Minute}
			in.Previous = Compute(in)
			in.Members = ms[1:]
			in.LastSeen = map[string]time.Time{ms[0].ID: t0}
			return in
		}()},
		{"balanced/scale-out-from-one", func() Input {
			ms := benchMembers(1000, false)
			in := Input{Members: ms[:1], Connectors: cs}
			in.Previous = Compute(in)
			in.Members = ms
			return in
		}()},
		{"static/steady", func() Input {
			in := Input{Members: benchMembers(1000, true), Connectors: cs}
			in.Previous = Compute(in)
			return in
		}()},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Compute(c.in)
			}
		})
	}
}
