package test

// Partition test: one agent is cut from etcd by a TCP proxy
// (testutil.Proxy); the timestamps its workers write themselves show that they
// die before any other agent starts the same job, and that no job ever has
// two workers. Ten rounds in one run.

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// partitionRound is what one cut-and-heal round observed.
type partitionRound struct {
	mode                  testutil.CutMode
	cutLeader             bool      // the cut agent was leader when cut
	cutAt, healAt         time.Time // wall clock of the proxy switch
	fencedSeen            bool      // the cut agent reported state "fenced"
	fencings              float64   // berth_fencing_total of a, increase over the round
	takenOver, handedBack time.Duration
}

// TestPartitionNoJobRunsTwice: agent "a" declares the jobs and reaches etcd
// only through the proxy; agent "b" is a standby connected straight to etcd.
// Each round cuts a (stall or reset, alternately), waits until b runs every
// job, heals, and waits until a has them back. The workers' own stamps must
// show that a's workers stop before b's start — and before a's lease could
// have expired on the server — and that no two workers of a job ever
// overlap, across the cuts and the graceful handoffs back.
func TestPartitionNoJobRunsTwice(t *testing.T) {
	const rounds = 10
	eps := embeddedEtcd(t)
	px := testutil.StartProxy(t, eps[0])
	name := clusterName()
	stamps := t.TempDir()
	// Workers linger 5 stamps (~0.1 s) after SIGTERM, so the graceful
	// handoff back to a has a window in which two could overlap.
	workload := fmt.Sprintf(`
[[connector]]
name = "p"
tasks = 2
  [connector.run]
  command = %[1]s
  [connector.task]
  command = %[1]s
`, stampCommand(stamps, 5))
	jobs := []string{"p", "p-0", "p-1"}
	a, b := newAgent(t, "a"), newAgent(t, "b")
	a.configure(clusterSpec{name: name, endpoints: []string{px.Endpoint()}, rebalanceDelay: "0s"},
		staticTable([]string{"p"}, []string{"p-0", "p-1"})+workload)
	b.configure(clusterSpec{name: name, endpoints: eps, rebalanceDelay: "0s"}, staticTable(nil, nil)+workload)

	testStart := time.Now()
	a.start()
	a.waitExactly(settle, jobs...)
	b.start()
	b.waitMember(settle)
	b.waitExactly(settle)

	var rs []partitionRound
	for i := 0; i < rounds; i++ {
		r := partitionRound{mode: testutil.Stall}
		if i%2 == 1 {
			r.mode = testutil.Reset
		}
		// a's workers have stamped before the cut, so the cut falls inside
		// their intervals.
		waitStamped(t, stamps, a.waitExactly(settle, jobs...))
		ai, err := a.info()
		if err != nil {
			t.Fatal(err)
		}
		r.cutLeader = ai.Leader
		fenced0 := fencings(t, a)
		r.cutAt = time.Now()
		px.Partition(r.mode)
		testutil.Eventually(t, settle, fmt.Sprintf("round %d: b runs every job", i), func() bool {
			if ai, err := a.info(); err == nil && ai.State == "fenced" {
				r.fencedSeen = true
				if ai.Leader {
					t.Errorf("round %d: the fenced agent reports itself leader", i)
				}
			}
			js, err := b.tryJobs()
			return err == nil && len(js) == len(jobs) && sameSet(runningIDs(js), jobs)
		})
		r.takenOver = time.Since(r.cutAt)
		if js, err := a.tryJobs(); err == nil && len(runningIDs(js)) > 0 {
			t.Errorf("round %d: the cut agent still reports running jobs %v after b took them", i, runningIDs(js))
		}
		// b's workers have stamped before the heal hands the jobs back: a
		// worker stopped before its shell ran a line would leave no trace.
		waitStamped(t, stamps, b.waitExactly(settle, jobs...))
		r.healAt = time.Now()
		px.Heal()
		a.waitMember(settle)
		a.waitExactly(settle, jobs...)
		b.waitExactly(settle)
		r.handedBack = time.Since(r.healAt)
		r.fencings = fencings(t, a) - fenced0
		rs = append(rs, r)
	}
	waitStamped(t, stamps, a.waitExactly(settle, jobs...))
	total := time.Since(testStart)

	// The workers' own account.
	byJob := map[string][]testutil.Interval{}
	for _, job := range jobs {
		ivs := stampIntervals(t, filepath.Join(stamps, job+".log"))
		byJob[job] = ivs
		for _, o := range testutil.Overlaps(ivs) {
			t.Errorf("job %s: two workers at once: %s (%s) and %s (%s), overlap %s", job,
				o[0], owner(o[0].Worker, a, b), o[1], owner(o[1].Worker, a, b), time.Duration(o[0].Last-o[1].First))
		}
		if want := 2*rounds + 1; len(ivs) != want {
			t.Errorf("job %s: %d worker processes stamped, want %d (a, then b and a again in each round; more means handoffs without a cut)", job, len(ivs), want)
			for _, iv := range ivs {
				t.Logf("  %s on %s: %d stamps, %s", job, owner(iv.Worker, a, b), iv.N, iv)
			}
		}
	}
	var lines []string
	gaps := map[string][]time.Duration{}
	for i, r := range rs {
		line := fmt.Sprintf("round %2d %-5s leader-cut=%-5v fenced-seen=%-5v fencings %v b-took-over %6s a-back %6s",
			i, r.mode, r.cutLeader, r.fencedSeen, r.fencings, r.takenOver.Round(time.Millisecond), r.handedBack.Round(time.Millisecond))
		for _, job := range jobs {
			ivs := byJob[job]
			cut := r.cutAt.UnixNano()
			// a's worker alive at the cut, and b's first worker after it.
			var lastA, firstB *testutil.Interval
			for k := range ivs {
				iv := &ivs[k]
				if owner(iv.Worker, a, b) == "a" && iv.First < cut && iv.Last >= cut-int64(time.Second) {
					lastA = iv
				}
				if owner(iv.Worker, a, b) == "b" && iv.First > cut && firstB == nil {
					firstB = iv
				}
			}
			if lastA == nil || firstB == nil {
				t.Errorf("round %d job %s: no a worker at the cut (%v) or no b worker after it (%v)", i, job, lastA, firstB)
				continue
			}
			if lastA.Last >= firstB.First {
				t.Errorf("round %d job %s: a's last stamp %s is not before b's first %s", i, job, lastA, firstB)
			}
			// Fenced by the local deadline: the last successful renewal was
			// sent before the cut, so the deadline (last renewal + TTL − 1 s)
			// falls within 1 s of it; a worker stamping a whole TTL after the
			// cut outlived any deadline the agent could have had.
			if dead := time.Duration(lastA.Last - cut); dead >= sessionTTL {
				t.Errorf("round %d job %s: a's worker stamped %s after the cut, not fenced within the %s session TTL", i, job, dead, sessionTTL)
			}
			gap := time.Duration(firstB.First - lastA.Last)
			gaps[job] = append(gaps[job], gap)
			line += fmt.Sprintf(" | %s a-dead +%s gap %s", job, time.Duration(lastA.Last-cut).Round(time.Millisecond), gap.Round(time.Millisecond))
		}
		lines = append(lines, line)
	}
	for _, job := range jobs {
		g := gaps[job]
		sort.Slice(g, func(i, j int) bool { return g[i] < g[j] })
		if len(g) > 0 {
			lines = append(lines, fmt.Sprintf("job %s: cut handoff gap min %s max %s over %d rounds", job, g[0].Round(time.Millisecond), g[len(g)-1].Round(time.Millisecond), len(g)))
		}
	}
	// One cut, one fencing: a session lost outside a cut (e.g. right after
	// rejoining) is a spurious fencing that moves jobs for no reason.
	if v := fencings(t, a); v != rounds {
		t.Errorf("berth_fencing_total of the cut agent = %v after %d cuts, want exactly %d (see fencings per round and the agent log)", v, rounds, rounds)
	}
	t.Logf("%d rounds in %s\n%s", rounds, total.Round(time.Millisecond), strings.Join(lines, "\n"))
}

// fencings is the cut agent's berth_fencing_total.
func fencings(t testing.TB, a *agent) float64 {
	t.Helper()
	v, ok := a.counter("berth_fencing_total")
	if !ok {
		t.Fatalf("agent %s exposes no berth_fencing_total", a.id)
	}
	return v
}
