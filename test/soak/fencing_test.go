//go:build soak

package soak

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/test/soak/fence"
	"github.com/berthd/berth/worker"
)

var (
	flagFencingRounds = flag.Int("soak.fencing.rounds", 50, "fault rounds of TestSoakFencing")
	flagFencingTTL    = flag.Duration("soak.fencing.ttl", 3*time.Second, "session_ttl of TestSoakFencing's agents (whole seconds, at least 2s)")
	flagFencingMargin = flag.Duration("soak.fencing.margin", 500*time.Millisecond, "the claim rule's margin in TestSoakFencing: a rule-following job writes only while now < deadline - margin")
	flagFencingKinds  = flag.String("soak.fencing.kinds", "", "TestSoakFencing's fault kinds, comma-separated, \"mixed\" for two at once (default: every kind and mixed)")
	flagFencingKeep   = flag.String("soak.fencing.history", "", "keep TestSoakFencing's history at this path (default: a temporary file, removed)")
)

// fencingSoak is the state of TestSoakFencing across rounds.
type fencingSoak struct {
	t        *testing.T
	w        *world
	rng      *rand.Rand
	histPath string
	hist     *historyTail
	margin   time.Duration
	variant  int    // the connectors' job command, toggled by changed reload storms
	planned  string // the kinds the rounds drew from, for the figures
	// mixed is true while a round of two faults at once begins: a
	// fault's step may then meet what the other did to its agent.
	mixed bool
	// failed counts the jobs found failed for good while a round
	// settled, each started again by a reload of its agent.
	failed int
	// restarts counts the agents stopped and started again because a
	// reload did not start such jobs.
	restarts int
}

// fencingRound is what one round did.
type fencingRound struct {
	index   int
	kinds   []*faultKind
	victims []*member // by kind; nil for etcd
	name    string    // the fault as the history names it
	took    time.Duration
}

// tokenOnly reports whether only the token can protect the resource in
// the round: one of its faults is of such a kind.
func (r fencingRound) tokenOnly() bool {
	for _, k := range r.kinds {
		if k.tokenOnly {
			return true
		}
	}
	return false
}

// has reports whether the round ran a fault of kind name.
func (r fencingRound) has(name string) (*member, bool) {
	for i, k := range r.kinds {
		if k.name == name {
			return r.victims[i], true
		}
	}
	return nil, false
}

// TestSoakFencing is the proof, from the resource's side, that no stale
// run of a job ever has a write accepted: the real agent binary on three
// agents (a and b each declare a connector of a job and two tasks, c is
// the standby) in their own network namespaces against a three-member
// etcd; every job a shell that forks three heartbeat writers (a
// background child, a setsid'ed child, a double-forked one) and becomes
// the fourth, each appending an attempt with the run's
// BERTH_FENCING_TOKEN to one history file every 50–100 ms (the
// resource, fencing_writer_test.go); the connectors' own jobs write
// whatever their claim says, the tasks follow the claim rule (write only
// before the claim file's deadline less -soak.fencing.margin) where berth
// gives them a claim file. -soak.fencing.rounds fault rounds, each one of
// fencingFaults or two of them at once (mixed), in an order and with
// victims and lengths from the seeded random source; every round ends
// once every agent runs its own jobs again, each writing.
//
// The checker (package fencing) replays the history as a store that
// fences by token and fails the test on a write accepted out of token
// order, a run without a token, two runs sharing one, a later run with a
// smaller one, or a run whose token changed. Beside it: zombie attempts
// (a run's writes after a newer run of the job has written) and runs
// writing at once only where the fault leaves the old run's processes
// stopped past the lease (the stalled host, the hung guard with no
// agent), every one of them rejected by the token there; and the failover
// gap's 99th percentile of the single-fault rounds (from 100 of them) within session TTL + 2 s
// (a mixed round's job may move twice: reported apart). A job an agent holds
// failed for good while a round settles is an error too (the agent is
// then reloaded, or restarted, so that the soak goes on). The figures, per fault kind,
// go to the log and to -soak.report; -soak.fencing.history keeps the
// history and the agents' and guards' logs.
func TestSoakFencing(t *testing.T) {
	testutil.NeedRoot(t)
	begun := time.Now()
	s := &fencingSoak{t: t, rng: newRand(t), histPath: filepath.Join(t.TempDir(), "history"), margin: *flagFencingMargin}
	if *flagFencingKeep != "" {
		var err error
		if s.histPath, err = filepath.Abs(*flagFencingKeep); err != nil {
			t.Fatal(err)
		}
		t.Logf("history kept at %s", s.histPath)
	}
	kinds, mixed, err := pickFaults(*flagFencingKinds)
	if err != nil {
		t.Fatal(err)
	}
	s.hist = newHistoryTail(t, s.histPath)
	// Every writer is gone at the end whatever happened: a job process
	// that outlived its agent is killed by its pid.
	t.Cleanup(func() {
		for _, p := range tagged(heartbeatEnv, s.histPath) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	s.w = newWorldOf(t, *flagFencingTTL, workload{defs: s.defs, started: s.started})
	if *flagFencingKeep != "" {
		t.Cleanup(s.keepLogs) // before the world's directories go
	}
	setup := time.Since(begun)

	var rounds []fencingRound
	finished := false
	defer func() {
		if !finished {
			s.hist.refresh()
			t.Logf("figures of the %d rounds before the failure:\n%s", len(rounds), fence.Table(fence.Summarize(s.hist.check.Rounds(), kindOf)))
		}
	}()
	for i, kinds := range s.plan(*flagFencingRounds, kinds, mixed) {
		r := s.round(i, kinds)
		rounds = append(rounds, r)
		// A pause before the next round; what comes in it counts for
		// this one.
		time.Sleep(200*time.Millisecond + uniform(s.rng, 500*time.Millisecond))
		s.hist.refresh()
		c := s.hist.check.Current()
		var on []string
		for _, v := range r.victims {
			if v != nil {
				on = append(on, v.id)
			}
		}
		t.Logf("round %3d %-50s on %-4s %6s: %4d attempts, %d new runs, %d stale, %d zombie, %d overlaps, %d held, longest gap %s (%s)",
			i, r.name, strings.Join(on, ","), r.took.Round(time.Millisecond), c.Attempts, c.NewRuns, c.Stale, c.Zombie, c.Overlaps, c.Held,
			c.MaxGap.Round(time.Millisecond), c.MaxGapJob)
	}
	s.w.stop()
	if !testutil.Poll(10*time.Second, func() bool { return len(tagged(heartbeatEnv, s.histPath)) == 0 }) {
		t.Errorf("job processes alive after every agent stopped: %v", tagged(heartbeatEnv, s.histPath))
	}
	s.hist.refresh()
	finished = true
	s.verdict(rounds, setup, time.Since(begun))
}

// defs are the world's connectors with heartbeat jobs: each connector's
// own job writes whatever its claim says (the token alone protects the
// resource), its tasks follow the claim rule.
func (s *fencingSoak) defs(w *world) string {
	var b strings.Builder
	for _, c := range w.connectors() {
		fmt.Fprintf(&b, "[[connector]]\nname = %q\ntasks = 2\n  [connector.run]\n  %s\n  [connector.task]\n  %s\n\n", c,
			heartbeatCommand(s.histPath, false, s.margin, s.variant), heartbeatCommand(s.histPath, true, s.margin, 0))
	}
	return b.String()
}

// started reports whether job's worker pid on agent m has written: an
// attempt from pid, or (a PID namespace may hide the host's pid from the
// job) the job's latest-beginning run is one of m's.
func (s *fencingSoak) started(w *world, m *member, job string, pid int) bool {
	if s.hist.wroteBy(job, pid) {
		return true
	}
	r, ok := s.hist.newestRun(job)
	return ok && w.ownerOf(r.Agent) == m.id
}

// pickFaults reads -soak.fencing.kinds: the single kinds named, and
// whether "mixed" is among them; "" is every kind and mixed. It returns
// an error naming an unknown kind and the allowed ones.
func pickFaults(list string) (kinds []*faultKind, mixed bool, err error) {
	if list == "" {
		return fencingFaults, true, nil
	}
	var names []string
	for _, k := range fencingFaults {
		names = append(names, k.name)
	}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "mixed" {
			mixed = true
			continue
		}
		i := slices.Index(names, name)
		if i < 0 {
			return nil, false, fmt.Errorf("-soak.fencing.kinds: unknown kind %q (allowed: %s, mixed)", name, strings.Join(names, ", "))
		}
		kinds = append(kinds, fencingFaults[i])
	}
	if len(kinds) == 0 {
		kinds = fencingFaults // mixed alone: two of any kind
	}
	return kinds, mixed, nil
}

// plan is n rounds: each of kinds and, with mixed, "mixed" (two of kinds
// at once) equally often, in random order.
func (s *fencingSoak) plan(n int, kinds []*faultKind, mixed bool) [][]*faultKind {
	slots := len(kinds)
	s.planned = fmt.Sprintf("%d kinds", len(kinds))
	if mixed {
		slots++
		s.planned += " and mixed rounds of two at once"
	}
	s.planned += ", equally often"
	var out [][]*faultKind
	for i := 0; i < n; i++ {
		if k := i % slots; k < len(kinds) {
			out = append(out, []*faultKind{kinds[k]})
			continue
		}
		for {
			a, b := kinds[s.rng.IntN(len(kinds))], kinds[s.rng.IntN(len(kinds))]
			if a.on != onEtcd || b.on != onEtcd {
				out = append(out, []*faultKind{a, b})
				break
			}
		}
	}
	s.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// victims picks a different agent for each kind that acts on one, the
// kinds that need a declaring agent first.
func (s *fencingSoak) victims(kinds []*faultKind) []*member {
	out := make([]*member, len(kinds))
	used := map[*member]bool{}
	for _, pass := range []faultOn{onHome, onAny} {
		for i, k := range kinds {
			if k.on != pass {
				continue
			}
			var cands []*member
			for _, m := range s.w.agents {
				if !used[m] && (pass == onAny || len(m.home) > 0) {
					cands = append(cands, m)
				}
			}
			out[i] = cands[s.rng.IntN(len(cands))]
			used[out[i]] = true
		}
	}
	return out
}

// round runs round i: its faults begun, stepped until each is undone,
// then every agent running its own jobs again, each job writing; the
// history's begin and end lines frame it.
func (s *fencingSoak) round(i int, kinds []*faultKind) fencingRound {
	t := s.t
	r := fencingRound{index: i, kinds: kinds, victims: s.victims(kinds), name: kinds[0].name}
	if len(kinds) > 1 {
		r.name = "mixed:" + kinds[0].name + "+" + kinds[1].name
	}
	start := time.Now()
	s.hist.mark(fence.Begin, i, r.name)
	steps := make([]step, len(kinds))
	s.mixed = len(kinds) > 1
	for j, k := range kinds {
		steps[j] = k.begin(s, r.victims[j])
	}
	done := make([]bool, len(steps))
	deadline := time.Now().Add(testutil.Deadline(3 * time.Minute))
	for {
		all := true
		for j := range steps {
			if !done[j] {
				done[j] = steps[j]()
			}
			all = all && done[j]
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("round %d (%s): the faults are not undone after 3 minutes\n%s", i, r.name, s.w.tails(nil))
		}
		s.hist.refresh()
		time.Sleep(10 * time.Millisecond)
	}
	s.settle(r)
	s.w.etcd.waitLeader(60 * time.Second)
	s.hist.mark(fence.End, i, r.name)
	s.hist.refresh()
	r.took = time.Since(start)
	return r
}

// settle waits up to 2 minutes until every agent runs its own jobs, each
// writing (world.settled). A job an agent holds failed for good (a start
// error it does not retry) is an error of the round; so that the soak
// goes on, the agent is then reloaded (which retries such a job) and, if
// a job of it is still failed 20 s later, stopped with SIGTERM and
// started again (a new lease guard).
func (s *fencingSoak) settle(r fencingRound) {
	t := s.t
	deadline := time.Now().Add(testutil.Deadline(2 * time.Minute))
	reloaded := map[*member]time.Time{}
	restarted := map[*member]bool{}
	for {
		ok, why := s.w.settled()
		if ok {
			return
		}
		for _, m := range s.w.agents {
			js, err := jobsOf(m.addr)
			if err != nil || restarted[m] {
				continue
			}
			var failed []string
			for _, id := range sortedKeys(js) {
				if j := js[id]; j.State == worker.Failed {
					failed = append(failed, id+": "+j.Reason)
				}
			}
			switch {
			case len(failed) == 0:
			case reloaded[m].IsZero():
				s.failed += len(failed)
				reloaded[m] = time.Now()
				t.Errorf("round %d (%s): agent %s holds jobs failed for good: %s; reloading it to start them again",
					r.index, r.name, m.id, strings.Join(failed, "; "))
				m.proc.signal(syscall.SIGHUP)
			case time.Since(reloaded[m]) > testutil.Deadline(20*time.Second):
				restarted[m] = true
				s.restarts++
				t.Errorf("round %d (%s): agent %s, reloaded, still holds jobs failed: %s; stopping it and starting it again",
					r.index, r.name, m.id, strings.Join(failed, "; "))
				m.proc.signal(syscall.SIGTERM)
				if err := m.proc.waitExit(60 * time.Second); err != nil {
					t.Errorf("agent %s: exit after SIGTERM: %v", m.id, err)
				}
				m.start()
			}
		}
		if time.Now().After(deadline) {
			tails, store := s.w.tails(nil), s.w.etcd.dump("soak-"+s.w.tag)
			s.dumpGoroutines()
			t.Fatalf("round %d (%s): not settled after 2 minutes: %s\n%s\n%s", r.index, r.name, why, tails, store)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dumpGoroutines has every agent print its goroutines (SIGQUIT: the Go
// runtime writes them to the agent's output, and the agent exits), for a
// round that does not settle: a pass stuck somewhere shows there. Each
// agent gets 10 s to exit; the kept logs (-soak.fencing.history) hold the
// dumps.
func (s *fencingSoak) dumpGoroutines() {
	for _, m := range s.w.agents {
		if m.proc.running() {
			m.proc.signal(syscall.SIGQUIT)
		}
	}
	for _, m := range s.w.agents {
		select {
		case <-m.proc.exited:
		case <-time.After(10 * time.Second):
		}
	}
}

// keepLogs copies every agent's log and its lease guard's next to the
// kept history (<history>.<agent>.log, <history>.<agent>.guard.log).
func (s *fencingSoak) keepLogs() {
	for _, m := range s.w.agents {
		for from, to := range map[string]string{m.logFile: ".log", string(guardLogOf(filepath.Join(m.file.dir, "data"))): ".guard.log"} {
			if b, err := os.ReadFile(from); err == nil {
				_ = os.WriteFile(s.histPath+"."+m.id+to, b, 0o644)
			}
		}
	}
}

// kindOf groups the mixed rounds in the figures.
func kindOf(fault string) string {
	if strings.HasPrefix(fault, "mixed:") {
		return "mixed (two at once)"
	}
	return fault
}

// verdict checks the replayed history against the rules and writes the
// figures.
func (s *fencingSoak) verdict(rounds []fencingRound, setup, whole time.Duration) {
	t := s.t
	check := s.hist.check
	replayed := check.Rounds()
	ttl := s.w.ttl

	// The breaches, each kind with its first few.
	for _, k := range fence.ViolationKinds() {
		n := check.Count(k)
		if n == 0 {
			continue
		}
		var egs []string
		for _, v := range check.Violations() {
			if v.Kind == k && len(egs) < 5 {
				egs = append(egs, "  "+v.String())
			}
		}
		t.Errorf("%s: %d, the first:\n%s", k, n, strings.Join(egs, "\n"))
	}
	if s.hist.bad > 0 {
		t.Errorf("%d history lines do not parse (a torn write?): %v", s.hist.bad, s.hist.badEgs)
	}

	// Zombies and runs writing at once, by round. The failover gap's goal
	// is one failover's: a mixed round can take two agents of three at
	// once (a stalled host and a hung guard), so that a job moves twice
	// before it writes again; its gaps are reported apart.
	var gaps, mixedGaps []time.Duration
	var guardPairs, guardJobRounds, guardRoundsWithPairs, guardRounds, guardTokenOnlyRounds, guardTokenOnlyPairs int
	var elsewhereStale, elsewhereZombie, tokenOnlyZombie, tokenOnlyStale, tokenOnlyZombieRule, tokenOnlyRounds int
	bad := 0
	for _, rd := range replayed {
		if rd.Index < 0 {
			if rd.Zombie > 0 || rd.Overlaps > 0 {
				t.Errorf("before the first fault: %d zombie attempts, %d pairs of runs writing at once", rd.Zombie, rd.Overlaps)
			}
			continue
		}
		r := rounds[rd.Index]
		if len(r.kinds) == 1 {
			gaps = append(gaps, rd.MaxGap)
		} else {
			mixedGaps = append(mixedGaps, rd.MaxGap)
		}
		// C38's row: the rounds where the kernel tie alone must close the
		// pair. A mixed round that also stalls a host or hangs a guard
		// (token only) may pair runs through that fault: counted apart.
		if v, ok := r.has("agent-and-guard-kill"); ok && !r.tokenOnly() {
			guardRounds++
			guardJobRounds += len(v.home)
			guardPairs += rd.Overlaps
			if rd.Overlaps > 0 {
				guardRoundsWithPairs++
			}
		} else if ok {
			guardTokenOnlyRounds++
			guardTokenOnlyPairs += rd.Overlaps
		}
		if r.tokenOnly() {
			tokenOnlyRounds++
			tokenOnlyZombie += rd.Zombie
			tokenOnlyStale += rd.Stale
			tokenOnlyZombieRule += rd.ZombieRule
			if rd.Zombie > rd.Stale {
				bad++
				if bad <= 20 {
					t.Errorf("round %d (%s): %d zombie attempts, only %d of them rejected by the token", rd.Index, rd.Fault, rd.Zombie, rd.Stale)
				}
			}
			continue
		}
		elsewhereStale += rd.Stale
		elsewhereZombie += rd.Zombie
		if rd.Zombie > 0 || rd.Overlaps > 0 {
			bad++
			if bad <= 20 {
				t.Errorf("round %d (%s): %d zombie attempts (%d rejected by the token), %d pairs of runs of one job writing at once: a run wrote past its claim where no process of it should have outlived the claim",
					rd.Index, rd.Fault, rd.Zombie, rd.Stale, rd.Overlaps)
			}
		}
	}
	if bad > 20 {
		t.Errorf("... and %d more rounds like these", bad-20)
	}
	// A 99th percentile needs 100 rounds to differ from the maximum: the
	// short form (CI's 50 rounds) reports it, the long form holds it.
	gapP99 := fence.Percentile(gaps, 99)
	if limit := ttl + 2*time.Second; gapP99 > limit && len(gaps) >= 100 {
		t.Errorf("failover gap p99 of the single-fault rounds %s, more than session TTL + 2 s = %s", gapP99.Round(time.Millisecond), limit)
	}

	// The figures.
	runs, tokenless := 0, 0
	for _, rd := range replayed {
		runs += rd.NewRuns
		tokenless += rd.TokenlessRuns
	}
	var took []time.Duration
	for _, r := range rounds {
		took = append(took, r.took)
	}
	var sum time.Duration
	for _, d := range took {
		sum += d
	}
	mean := time.Duration(0)
	if len(took) > 0 {
		mean = sum / time.Duration(len(took))
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	version, _ := exec.Command(berthBin, "version").CombinedOutput()
	rows := [][2]string{
		{"berth binary", fmt.Sprintf("%s (%s)", berthBin, strings.TrimSpace(strings.SplitN(string(version), "\n", 2)[0]))},
		{"fault rounds", fmt.Sprintf("%d (%s; %d agents, %d etcd members, session TTL %s)", len(rounds), s.planned, len(s.w.agents), len(s.w.etcd.members), ttl)},
		{"jobs, writers", fmt.Sprintf("%d jobs, each a shell that forks 3 writers and becomes the 4th; %d follow the claim rule (margin %s)", len(s.w.jobs), 2*len(s.w.connectors()), s.margin)},
		{"history", fmt.Sprintf("%d lines, %d runs, %d of them without a token", s.hist.lines, runs, tokenless)},
		{"time per round, begin to settled (mean, median, max)", fmt.Sprintf("%s, %s, %s", ms(mean), ms(fence.Percentile(took, 50)), ms(fence.Percentile(took, 100)))},
		{"whole soak (of which the world's start)", fmt.Sprintf("%s (%s)", ms(whole), ms(setup))},
		{"jobs found failed for good while a round settled; agents restarted because a reload did not start them", fmt.Sprintf("%d; %d", s.failed, s.restarts)},
	}
	for _, k := range fence.ViolationKinds() {
		rows = append(rows, [2]string{k.String(), fmt.Sprint(check.Count(k))})
	}
	writeFigures(t, "fencing", rows)

	targets := fmt.Sprintf("| what | measured | goal |\n|---|---|---|\n"+
		"| writes accepted out of token order, %d fault rounds | %d | 0 |\n"+
		"| runs without a token | %d of %d | 0 |\n"+
		"| pairs of runs of one job writing at once, agent and guard killed (no stalled host or hung guard in the round) | %d in %d job-rounds (%d of %d rounds with a pair); with a stalled host or hung guard too: %d pairs in %d rounds, their stale writes in the row below | 0 |\n"+
		"| stale attempts, every fault kind but the stalled host and the hung guard | %d zombie attempts, %d rejected by the token | 0 |\n"+
		"| stale attempts there (%d rounds) | %d zombie attempts (%d of rule-following jobs), %d rejected by the token | every one rejected by the token, counted |\n"+
		"| failover gap p99 (longest gap with no accepted writer, per single-fault round) | %s (p50 %s) | ≤ session TTL + 2 s = %s |\n"+
		"| the same in mixed rounds (two faults at once, a job may move twice) | %s (p50 %s) | reported |\n",
		len(rounds), check.Count(fence.AcceptedOutOfOrder), tokenless, runs,
		guardPairs, guardJobRounds, guardRoundsWithPairs, guardRounds, guardTokenOnlyPairs, guardTokenOnlyRounds,
		elsewhereZombie, elsewhereStale, tokenOnlyRounds, tokenOnlyZombie, tokenOnlyZombieRule, tokenOnlyStale,
		ms(gapP99), ms(fence.Percentile(gaps, 50)), ttl+2*time.Second,
		ms(fence.Percentile(mixedGaps, 99)), ms(fence.Percentile(mixedGaps, 50)))
	appendReport(t, "\n#### targets\n\n"+targets+"\n#### per fault kind\n\n"+fence.Table(fence.Summarize(replayed, kindOf)))
}

// appendReport logs text and appends it to -soak.report (after the
// table writeFigures wrote there).
func appendReport(t testing.TB, text string) {
	t.Log(text)
	if *flagReport == "" {
		return
	}
	f, err := os.OpenFile(*flagReport, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Errorf("report: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Errorf("report: %v", err)
	}
}
