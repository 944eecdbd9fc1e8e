//go:build soak

package soak

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cutRound is one partition of TestSoakPartitions: a round of its own, or
// during a kill round.
type cutRound struct {
	round       int
	victim      string
	mode        cutMode
	length      time.Duration // how long the link stayed cut
	lastRenewal time.Time     // the victim's, as first reported after the cut
	settle      time.Duration // from the heal until every agent ran its own jobs again
	cutAt       time.Time     // when the cut was whole
	healAt      time.Time     // when it was undone
	inKill      bool          // during a kill round
}

// TestSoakPartitions cuts one agent at a time from the etcd cluster,
// -soak.partitions times, one every few seconds, for 0.3 s to 5 s —
// alternately its link set down and every packet dropped — while
// -soak.burners processes burn CPU. Among the cuts, in random order,
// -soak.memberkills rounds SIGKILL an agent (memberkills_test.go): started
// again at once it must adopt its jobs; not started again, its lease guard
// must kill them before the lease can expire, and another agent take them;
// some of these rounds cut another agent, or the killed one, meanwhile.
// The workers' own stamps must show no two workers of one job alive at
// once, and for every session an agent lost, fenced or killed, its
// workers dead before last renewal + TTL. A cut agent's last renewal
// before the cut is read from its /v1/agent over the management link,
// which is never cut.
func TestSoakPartitions(t *testing.T) {
	w := newWorld(t, 2*time.Second) // the smallest TTL the agent takes: the least slack
	rng := newRand(t)
	startBurners(t, *flagBurners)
	// The rounds in random order: -1 a cut, k >= 0 a kill round of kind
	// memberKills[k], every kind equally often.
	plan := make([]int, 0, *flagPartitions+*flagMemberKills)
	for i := 0; i < *flagPartitions; i++ {
		plan = append(plan, -1)
	}
	for i := 0; i < *flagMemberKills; i++ {
		plan = append(plan, i%len(memberKills))
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })

	var rounds []cutRound
	var kills []killRound
	var lines []string
	cuts := 0
	for i, k := range plan {
		if k >= 0 {
			kr, cut := w.killRound(i, rng, memberKills[k])
			if cut != nil {
				rounds = append(rounds, *cut)
			}
			kills = append(kills, kr)
			lines = append(lines, kr.String())
		} else {
			m := w.agents[rng.IntN(len(w.agents))]
			mode := linkDown
			if cuts%2 == 1 {
				mode = dropAll
			}
			cuts++
			r := w.cut(i, m, mode)
			time.Sleep(300*time.Millisecond + time.Duration(rng.Int64N(int64(4700*time.Millisecond))))
			w.heal(m, &r)
			r.settle = w.settle(2 * time.Minute)
			rounds = append(rounds, r)
			lr := "—"
			if !r.lastRenewal.IsZero() {
				lr = r.lastRenewal.Format("15:04:05.000")
			}
			lines = append(lines, fmt.Sprintf("round %3d: %s %-9s for %5s (last renewal %s), settled %s after the heal",
				i, r.victim, r.mode, r.length.Round(time.Millisecond), lr, r.settle.Round(time.Millisecond)))
		}
		// One round every few seconds.
		time.Sleep(500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond))))
	}
	renewals := w.renewals()
	w.stop()
	v := w.judge()
	cut, other := classifyFencings(w, rounds)

	var settles []time.Duration
	cutLinks, cutDrops, inKills := 0, 0, 0
	for _, r := range rounds {
		if r.inKill {
			inKills++
		} else {
			settles = append(settles, r.settle)
		}
		if r.mode == linkDown {
			cutLinks++
		} else {
			cutDrops++
		}
	}
	t.Logf("rounds:\n%s", strings.Join(lines, "\n"))
	rows := [][2]string{
		{"partitions", fmt.Sprintf("%d (%d link down, %d %s), 0.3–5 s each; %d of them during kill rounds", len(rounds), cutLinks, cutDrops, w.net.dropMechanism(), inKills)},
		{"agents, etcd members, session TTL", fmt.Sprintf("%d, %d, %s", len(w.agents), len(w.etcd.members), w.ttl)},
		{"CPU burners", fmt.Sprint(*flagBurners)},
		{"settled after a heal (median, 95th percentile)", fmt.Sprintf("%s, %s", percentile(settles, 50).Round(time.Millisecond), percentile(settles, 95).Round(time.Millisecond))},
		{"fencings of the cut agent during its cut; of any agent at any other time", fmt.Sprintf("%d; %d", cut, other)},
		{"lease renewals (berth_lease_renew_seconds) slower than 100 ms, 250 ms, 1 s", renewals},
	}
	rows = append(rows, killRows(kills, w.ttl)...)
	writeFigures(t, "partitions", append(rows, v.rows()...))
}

// cut cuts m's store link for round i and returns the round, its cut
// whole.
func (w *world) cut(i int, m *member, mode cutMode) cutRound {
	w.t.Helper()
	if err := m.host.partition(mode); err != nil {
		w.t.Fatal(err)
	}
	return cutRound{round: i, victim: m.id, mode: mode, cutAt: time.Now()}
}

// heal undoes r's cut of m and checks that m renewed no lease during the
// cut.
func (w *world) heal(m *member, r *cutRound) {
	w.t.Helper()
	r.healAt = time.Now()
	if err := m.host.heal(); err != nil {
		w.t.Fatal(err)
	}
	r.length = r.healAt.Sub(r.cutAt)
	if lr, ok := m.poller.renewalAt(r.cutAt, r.healAt); ok {
		r.lastRenewal = lr
		if lr.After(r.cutAt) {
			w.t.Errorf("round %d: agent %s renewed its lease at %s, during the cut (%s at %s)", r.round, m.id,
				lr.Format("15:04:05.000000"), r.mode, r.cutAt.Format("15:04:05.000000"))
		}
	}
}

// classifyFencings counts the fencings of the agent a round cut, between
// the cut and the heal plus one TTL (its lease could not be renewed), and
// every other fencing: an agent whose renewals ran late under the CPU
// load, or that lost a session again after a heal.
func classifyFencings(w *world, rounds []cutRound) (cut, other int) {
	perRound := make([][]fencing, len(rounds))
	for _, m := range w.agents {
		for _, f := range m.fencings() {
			during := false
			for i, r := range rounds {
				if r.victim == m.id && !f.at.Before(r.cutAt) && f.at.Before(r.healAt.Add(w.ttl)) {
					during = true
					perRound[i] = append(perRound[i], f)
				}
			}
			if during {
				cut++
			} else {
				other++
				w.t.Logf("agent %s fenced outside a cut of its own:\n%s", m.id, f.line)
			}
		}
	}
	for i, fs := range perRound {
		if len(fs) > 1 {
			var lines []string
			for _, f := range fs {
				lines = append(lines, f.line)
			}
			w.t.Logf("round %d: %s fenced %d times (cut %s, healed %s):\n%s", i, rounds[i].victim, len(fs),
				rounds[i].cutAt.Format("15:04:05.000"), rounds[i].healAt.Format("15:04:05.000"), strings.Join(lines, "\n"))
		}
	}
	return cut, other
}

// renewals sums, over the agents, the renewals of berth_lease_renew_seconds
// slower than 100 ms, 250 ms and 1 s, read from each agent's /metrics.
func (w *world) renewals() string {
	slower := map[string]float64{"0.1": 0, "0.25": 0, "1": 0}
	var total float64
	for _, m := range w.agents {
		resp, err := apiClient.Get("http://" + m.addr + "/metrics")
		if err != nil {
			w.t.Errorf("agent %s: /metrics: %v", m.id, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		buckets := map[string]float64{}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "berth_lease_renew_seconds_bucket{le=\""); ok {
				le, val, _ := strings.Cut(rest, "\"} ")
				buckets[le], _ = strconv.ParseFloat(val, 64)
			}
		}
		for le := range slower {
			slower[le] += buckets["+Inf"] - buckets[le]
		}
		total += buckets["+Inf"]
	}
	return fmt.Sprintf("%.0f, %.0f, %.0f of %.0f", slower["0.1"], slower["0.25"], slower["1"], total)
}
