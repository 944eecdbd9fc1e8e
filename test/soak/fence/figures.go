package fence

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Summary is the figures of every round of one fault kind.
type Summary struct {
	Kind                 string
	Rounds               int
	Attempts, Accepted   int
	Stale, StaleRule     int
	Zombie, ZombieRule   int
	Held                 int
	NewRuns, Tokenless   int
	Overlaps, Violations int
	// The rounds' MaxGap: the median, the 99th percentile (nearest rank)
	// and the largest.
	GapP50, GapP99, GapMax time.Duration
}

// Summarize groups rounds by kindOf(their fault) — nil: the fault as it
// is — in the order each kind first appears, skipping the span before the
// first round, and appends a total row (Kind "all").
func Summarize(rounds []Round, kindOf func(fault string) string) []Summary {
	if kindOf == nil {
		kindOf = func(f string) string { return f }
	}
	var order []string
	by := map[string][]Round{}
	var all []Round
	for _, r := range rounds {
		if r.Index < 0 {
			continue
		}
		k := kindOf(r.Fault)
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
		all = append(all, r)
	}
	var out []Summary
	for _, k := range order {
		out = append(out, summarize(k, by[k]))
	}
	if len(all) > 0 {
		out = append(out, summarize("all", all))
	}
	return out
}

func summarize(kind string, rs []Round) Summary {
	s := Summary{Kind: kind, Rounds: len(rs)}
	var gaps []time.Duration
	for _, r := range rs {
		s.Attempts += r.Attempts
		s.Accepted += r.Accepted
		s.Stale += r.Stale
		s.StaleRule += r.StaleRule
		s.Zombie += r.Zombie
		s.ZombieRule += r.ZombieRule
		s.Held += r.Held
		s.NewRuns += r.NewRuns
		s.Tokenless += r.TokenlessRuns
		s.Overlaps += r.Overlaps
		s.Violations += r.Violations
		gaps = append(gaps, r.MaxGap)
	}
	s.GapP50, s.GapP99, s.GapMax = Percentile(gaps, 50), Percentile(gaps, 99), Percentile(gaps, 100)
	return s
}

// Percentile is the p-th percentile (0 < p <= 100) of ds by nearest rank:
// the smallest value with at least p % of ds at or below it; 0 when ds is
// empty.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// Table renders summaries as a Markdown table, one row each.
func Table(sums []Summary) string {
	var b strings.Builder
	b.WriteString("| fault kind | rounds | attempts | accepted | stale, rejected by the token (rule-following jobs) | zombie attempts (rule-following) | runs writing at once (pairs) | new runs (without a token) | held back by the claim rule | violations | longest gap with no accepted writer, p50 / p99 / max |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	for _, s := range sums {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d (%d) | %d (%d) | %d | %d (%d) | %d | %d | %s / %s / %s |\n",
			s.Kind, s.Rounds, s.Attempts, s.Accepted, s.Stale, s.StaleRule, s.Zombie, s.ZombieRule, s.Overlaps,
			s.NewRuns, s.Tokenless, s.Held, s.Violations, ms(s.GapP50), ms(s.GapP99), ms(s.GapMax))
	}
	return b.String()
}
