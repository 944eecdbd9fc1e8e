package fence

import (
	"strings"
	"testing"
	"time"
)

// history builds a synthetic history, 10 ms between records.
type history struct {
	t    *testing.T
	c    *Checker
	at   time.Duration
	runs map[string]Record // by run ID: the fields its writes share
}

func newHistory(t *testing.T) *history {
	return &history{t: t, c: NewChecker(), at: time.Hour, runs: map[string]Record{}}
}

// feed sends r through its line form, as the soak does.
func (h *history) feed(r Record) {
	h.t.Helper()
	h.at += 10 * time.Millisecond
	r.At = h.at
	p, err := Parse(r.Line())
	if err != nil {
		h.t.Fatal(err)
	}
	h.c.Feed(p)
}

// run declares run id of job, begun at start (ms after the history's
// start) by agent with token ("" : none).
func (h *history) run(id, job string, start int, agent, token string, rule bool) {
	if token == "" {
		token = NoToken
	}
	h.runs[id] = Record{Job: job, Token: token, Run: id, RunStart: time.Hour + time.Duration(start)*time.Millisecond, Agent: agent, PID: 100 + len(h.runs), Role: "main", Rule: rule}
}

// write sends n attempts of run id.
func (h *history) write(id string, n int) {
	for i := 0; i < n; i++ {
		r := h.runs[id]
		r.Kind = Attempt
		h.feed(r)
	}
}

func (h *history) held(id string) {
	r := h.runs[id]
	r.Kind = Held
	h.feed(r)
}

func (h *history) begin(round int, fault string) {
	h.feed(Record{Kind: Begin, Round: round, Fault: fault})
}
func (h *history) end(round int, fault string) { h.feed(Record{Kind: End, Round: round, Fault: fault}) }

// wait advances the clock by d.
func (h *history) wait(d time.Duration) { h.at += d }

// counts is every violation kind's count, for comparison.
func (h *history) counts() map[ViolationKind]int {
	out := map[ViolationKind]int{}
	for _, k := range ViolationKinds() {
		if n := h.c.Count(k); n > 0 {
			out[k] = n
		}
	}
	return out
}

func (h *history) wantCounts(want map[ViolationKind]int) {
	h.t.Helper()
	got := h.counts()
	if len(got) != len(want) {
		h.t.Errorf("violations %v, want %v: %v", got, want, h.c.Violations())
		return
	}
	for k, n := range want {
		if got[k] != n {
			h.t.Errorf("violations %v, want %v: %v", got, want, h.c.Violations())
			return
		}
	}
}

// A clean failover: the old run stops, a later run with a larger token
// takes over after a gap. Nothing to report but the gap.
func TestCleanFailoverPasses(t *testing.T) {
	h := newHistory(t)
	h.run("r1", "j", 0, "a", "7", false)
	h.run("r2", "j", 5000, "c", "12", false)
	h.write("r1", 5)
	h.begin(0, "kill")
	h.write("r1", 2)
	h.wait(2 * time.Second)
	h.write("r2", 5)
	h.end(0, "kill")
	h.wantCounts(nil)
	r := h.c.Current()
	if r.Index != 0 || r.Fault != "kill" || r.Attempts != 7 || r.Accepted != 7 || r.Stale != 0 || r.Zombie != 0 || r.Overlaps != 0 || r.NewRuns != 1 {
		t.Errorf("round %+v", r)
	}
	if want := 2*time.Second + 10*time.Millisecond; r.MaxGap != want || r.MaxGapJob != "j" {
		t.Errorf("max gap %s of %q, want %s of j", r.MaxGap, r.MaxGapJob, want)
	}
	if r.End == 0 || r.Begin == 0 || r.End <= r.Begin {
		t.Errorf("round begin %s, end %s", r.Begin, r.End)
	}
}

// A zombie (the older run, stalled, writes again after the newer run's
// first write) is rejected by the fence: counted stale and zombie, the two
// runs wrote at once, and nothing is violated.
func TestZombieWritesAreRejected(t *testing.T) {
	h := newHistory(t)
	h.run("old", "j", 0, "a", "7", false)
	h.run("new", "j", 5000, "c", "12", true)
	h.write("old", 3)
	h.begin(0, "host-stall")
	h.write("new", 2)
	h.write("old", 4)
	h.write("new", 1)
	h.wantCounts(nil)
	r := h.c.Current()
	if r.Stale != 4 || r.Zombie != 4 || r.ZombieRule != 0 || r.StaleRule != 0 || r.Overlaps != 1 || r.Accepted != 3 {
		t.Errorf("round %+v, want 4 stale, 4 zombie, 1 overlap, 3 accepted", r)
	}
}

// The rule-following split counts a rule-following zombie's attempts.
func TestRuleFollowingZombiesCountedApart(t *testing.T) {
	h := newHistory(t)
	h.run("old", "j", 0, "a", "7", true)
	h.run("new", "j", 5000, "c", "12", true)
	h.write("old", 1)
	h.write("new", 1)
	h.held("old")
	h.write("old", 2)
	r := h.c.Current()
	if r.Stale != 2 || r.StaleRule != 2 || r.ZombieRule != 2 || r.Held != 1 {
		t.Errorf("round %+v, want 2 stale and 2 zombie of rule-following jobs, 1 held", r)
	}
}

// An older run with a larger token than the newer: the fence takes the
// zombie's write after the newer run's and then rejects the newer run (a
// job locked out); both breaches show.
func TestOlderRunWithLargerTokenIsCaught(t *testing.T) {
	h := newHistory(t)
	h.run("old", "j", 0, "a", "20", false)
	h.run("new", "j", 5000, "c", "12", false)
	h.write("new", 2) // accepted: nothing higher yet
	h.write("old", 1) // accepted (20 >= 12), after a later run's write
	h.write("new", 1) // rejected (12 < 20)
	h.wantCounts(map[ViolationKind]int{SmallerLaterToken: 1, AcceptedOutOfOrder: 1})
	if r := h.c.Current(); r.Stale != 1 || r.Accepted != 3 {
		t.Errorf("round %+v, want 1 stale, 3 accepted", r)
	}
	vs := h.c.Violations()
	if len(vs) != 2 || !strings.Contains(vs[0].String(), "run new of c") || vs[0].Round != -1 {
		t.Errorf("violations %v", vs)
	}
}

// A later run with a smaller token is caught even when the runs never
// write at once.
func TestLaterRunWithSmallerTokenIsCaught(t *testing.T) {
	h := newHistory(t)
	h.run("r1", "j", 0, "a", "30", false)
	h.run("r2", "j", 5000, "c", "29", false)
	h.write("r1", 2)
	h.write("r2", 2)
	h.wantCounts(map[ViolationKind]int{SmallerLaterToken: 1})
	if r := h.c.Current(); r.Stale != 2 {
		t.Errorf("round %+v: the fence must reject the later run with the smaller token", r)
	}
}

// Two runs with one token: the fence takes them for one run and accepts
// the older's write after the newer's.
func TestSharedTokenIsCaught(t *testing.T) {
	h := newHistory(t)
	h.run("r1", "j", 0, "a", "9", false)
	h.run("r2", "j", 5000, "c", "9", false)
	h.write("r1", 1)
	h.write("r2", 1)
	h.write("r1", 1)
	h.wantCounts(map[ViolationKind]int{SharedToken: 1, AcceptedOutOfOrder: 1})
}

// Runs without a token, or with one that is no number, are breaches;
// their writes are taken as an unfenced store would, so that zombies and
// overlaps still show (today's binary).
func TestRunWithoutTokenIsCaught(t *testing.T) {
	h := newHistory(t)
	h.run("r1", "j", 0, "a", "", false)
	h.run("r2", "j", 5000, "c", "", false)
	h.run("r3", "k", 0, "a", "abc", false)
	h.begin(0, "agent-and-guard-kill")
	h.write("r1", 1)
	h.write("r2", 1)
	h.write("r1", 2)
	h.write("r3", 1)
	h.wantCounts(map[ViolationKind]int{RunWithoutToken: 3})
	r := h.c.Current()
	if r.TokenlessRuns != 3 || r.Zombie != 2 || r.Stale != 0 || r.Accepted != 5 || r.Overlaps != 1 {
		t.Errorf("round %+v, want 3 tokenless runs, 2 zombie, 0 stale, 5 accepted, 1 overlap", r)
	}
	if vs := h.c.Violations(); !strings.Contains(vs[2].Detail, `"abc", not a decimal integer`) {
		t.Errorf("violation %v", vs[2])
	}
}

// One run whose processes write with different tokens.
func TestTokenChangedIsCaught(t *testing.T) {
	h := newHistory(t)
	h.run("r1", "j", 0, "a", "5", false)
	h.write("r1", 1)
	r := h.runs["r1"]
	r.Token = "6"
	h.runs["r1"] = r
	h.write("r1", 2)
	h.wantCounts(map[ViolationKind]int{TokenChanged: 1})
}

// Runs that began later but wrote first, then older ones: each pair
// wrote at once (counted once), the older's writes are zombies.
func TestOverlapsCountedOncePerPair(t *testing.T) {
	h := newHistory(t)
	h.run("r1", "j", 0, "a", "1", false)
	h.run("r2", "j", 100, "b", "2", false)
	h.run("r3", "j", 200, "c", "3", false)
	h.write("r3", 1)
	h.write("r1", 1) // older than r3, first write after r3's: overlap (r1, r3)
	h.write("r2", 1) // overlap (r2, r3)
	h.write("r1", 3) // overlap (r1, r2); (r1, r3) not again
	h.write("r2", 1)
	r := h.c.Current()
	if r.Overlaps != 3 || r.Zombie != 6 || r.Stale != 6 {
		t.Errorf("round %+v, want 3 overlaps, 6 zombie and stale", r)
	}
	h.wantCounts(nil)
}

// Attempts after a round's end count for it until the next begins; a gap
// counts for the round in which it ends; jobs are fenced apart.
func TestRoundsSplitTheHistory(t *testing.T) {
	h := newHistory(t)
	h.run("a1", "ja", 0, "a", "1", false)
	h.run("b1", "jb", 0, "b", "1", false)
	h.write("a1", 1)
	h.write("b1", 1)
	h.begin(0, "partition")
	h.write("a1", 1)
	h.end(0, "partition")
	h.write("b1", 1) // still round 0
	h.begin(1, "upgrade")
	h.wait(3 * time.Second)
	h.write("a1", 1)
	h.end(1, "upgrade")
	rs := h.c.Rounds()
	if len(rs) != 3 {
		t.Fatalf("rounds %+v", rs)
	}
	if rs[0].Index != -1 || rs[0].Attempts != 2 || rs[1].Attempts != 2 || rs[1].Fault != "partition" || rs[2].Attempts != 1 {
		t.Errorf("rounds %+v", rs)
	}
	if rs[2].MaxGap < 3*time.Second || rs[2].MaxGapJob != "ja" {
		t.Errorf("round 1's gap %s of %q, want at least 3s of ja", rs[2].MaxGap, rs[2].MaxGapJob)
	}
	h.wantCounts(nil)
}

// A write whose clock reading is older than the last accepted one (its
// process stopped between reading the clock and writing) does not make a
// negative gap.
func TestGapNeverNegative(t *testing.T) {
	c := NewChecker()
	base := Record{Kind: Attempt, Job: "j", Token: "1", Run: "r", RunStart: 1, Agent: "a", PID: 1, Role: "main"}
	for _, at := range []time.Duration{time.Second, 3 * time.Second, 2 * time.Second, 3500 * time.Millisecond} {
		r := base
		r.At = at
		c.Feed(r)
	}
	if g := c.Current().MaxGap; g != 2*time.Second {
		t.Errorf("max gap %s, want 2s", g)
	}
}

// Only Keep violations keep their details; every one is counted.
func TestViolationsKeptUpToKeep(t *testing.T) {
	h := newHistory(t)
	h.c.Keep = 2
	for i := 0; i < 5; i++ {
		id := string(rune('a' + i))
		h.run(id, "j", i, "a", "", false)
		h.write(id, 1)
	}
	if n, kept := h.c.Count(RunWithoutToken), len(h.c.Violations()); n != 5 || kept != 2 {
		t.Errorf("counted %d, kept %d; want 5, 2", n, kept)
	}
}

func TestSummarizeAndTable(t *testing.T) {
	rounds := []Round{
		{Index: -1, Attempts: 100},
		{Index: 0, Fault: "kill", Attempts: 10, Accepted: 9, Stale: 1, MaxGap: time.Second},
		{Index: 1, Fault: "mixed:kill+partition", Attempts: 5, Accepted: 5, MaxGap: 3 * time.Second},
		{Index: 2, Fault: "kill", Attempts: 10, Accepted: 10, Overlaps: 2, MaxGap: 2 * time.Second},
	}
	sums := Summarize(rounds, func(f string) string {
		if strings.HasPrefix(f, "mixed:") {
			return "mixed"
		}
		return f
	})
	if len(sums) != 3 || sums[0].Kind != "kill" || sums[1].Kind != "mixed" || sums[2].Kind != "all" {
		t.Fatalf("summaries %+v", sums)
	}
	k := sums[0]
	if k.Rounds != 2 || k.Attempts != 20 || k.Stale != 1 || k.Overlaps != 2 || k.GapP50 != time.Second || k.GapP99 != 2*time.Second || k.GapMax != 2*time.Second {
		t.Errorf("kill %+v", k)
	}
	if a := sums[2]; a.Rounds != 3 || a.Attempts != 25 || a.GapMax != 3*time.Second {
		t.Errorf("all %+v", a)
	}
	tab := Table(sums)
	if !strings.Contains(tab, "| kill | 2 | 20 | 19 | 1 (0) |") || strings.Count(tab, "\n") != 5 {
		t.Errorf("table:\n%s", tab)
	}
}

func TestPercentileNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{50: 100, 99: 198, 100: 200, 0.1: 1} {
		if got := Percentile(ds, p); got != want {
			t.Errorf("p%v = %d, want %d", p, got, want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty: want 0")
	}
}
