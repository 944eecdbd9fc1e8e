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

// cutRound is one partition of TestSoakPartitions.
type cutRound struct {
	victim      string
	mode        cutMode
	length      time.Duration // how long the link stayed cut
	lastRenewal time.Time     // the victim's, as first reported after the cut
	settle      time.Duration // from the heal until every agent ran its own jobs again
	cutAt       time.Time     // when the cut was whole
	healAt      time.Time     // when it was undone
}

// TestSoakPartitions cuts one agent at a time from the etcd cluster,
// -soak.partitions times, one every few seconds, for 0.3 s to 5 s —
// alternately its link set down and every packet dropped — while
// -soak.burners processes burn CPU. The workers' own stamps must show no
// two workers of one job alive at once, and for every session an agent
// lost, its workers dead before last renewal + TTL. A cut agent's last
// renewal before the cut is read from its /v1/agent over the management
// link, which is never cut.
func TestSoakPartitions(t *testing.T) {
	w := newWorld(t, 2*time.Second) // the smallest TTL the agent takes: the least slack
	rng := newRand(t)
	startBurners(t, *flagBurners)
	var rounds []cutRound
	for i := 0; i < *flagPartitions; i++ {
		m := w.agents[rng.IntN(len(w.agents))]
		r := cutRound{victim: m.id, mode: linkDown, length: 300*time.Millisecond + time.Duration(rng.Int64N(int64(4700*time.Millisecond)))}
		if i%2 == 1 {
			r.mode = dropAll
		}
		if err := m.host.partition(r.mode); err != nil {
			t.Fatal(err)
		}
		cutAt := time.Now() // the cut is whole once partition returns
		time.Sleep(r.length)
		healAt := time.Now()
		if err := m.host.heal(); err != nil {
			t.Fatal(err)
		}
		if lr, ok := m.poller.renewalAt(cutAt, healAt); ok {
			r.lastRenewal = lr
			if lr.After(cutAt) {
				t.Errorf("round %d: agent %s renewed its lease at %s, during the cut (%s at %s)", i, m.id,
					lr.Format("15:04:05.000000"), r.mode, cutAt.Format("15:04:05.000000"))
			}
		}
		r.cutAt, r.healAt = cutAt, healAt
		r.settle = w.settle(2 * time.Minute)
		rounds = append(rounds, r)
		// One partition every few seconds.
		time.Sleep(500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond))))
	}
	renewals := w.renewals()
	w.stop()
	v := w.judge()
	cut, other := classifyFencings(w, rounds)

	var lines []string
	var settles []time.Duration
	cutLinks, cutDrops := 0, 0
	for i, r := range rounds {
		settles = append(settles, r.settle)
		if r.mode == linkDown {
			cutLinks++
		} else {
			cutDrops++
		}
		lr := "—"
		if !r.lastRenewal.IsZero() {
			lr = r.lastRenewal.Format("15:04:05.000")
		}
		lines = append(lines, fmt.Sprintf("round %3d: %s %-9s for %5s (last renewal %s), settled %s after the heal",
			i, r.victim, r.mode, r.length.Round(time.Millisecond), lr, r.settle.Round(time.Millisecond)))
	}
	t.Logf("rounds:\n%s", strings.Join(lines, "\n"))
	rows := [][2]string{
		{"partitions", fmt.Sprintf("%d (%d link down, %d %s), 0.3–5 s each", len(rounds), cutLinks, cutDrops, w.net.dropMechanism())},
		{"agents, etcd members, session TTL", fmt.Sprintf("%d, %d, %s", len(w.agents), len(w.etcd.members), w.ttl)},
		{"CPU burners", fmt.Sprint(*flagBurners)},
		{"settled after a heal (median, 95th percentile)", fmt.Sprintf("%s, %s", percentile(settles, 50).Round(time.Millisecond), percentile(settles, 95).Round(time.Millisecond))},
		{"fencings of the cut agent during its cut; of any agent at any other time", fmt.Sprintf("%d; %d", cut, other)},
		{"lease renewals (berth_lease_renew_seconds) slower than 100 ms, 250 ms, 1 s", renewals},
	}
	writeFigures(t, "partitions", append(rows, v.rows()...))
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
