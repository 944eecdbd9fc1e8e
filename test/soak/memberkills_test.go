//go:build soak

package soak

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
)

// The kill rounds of TestSoakPartitions: an agent of the cluster is
// SIGKILLed (its lease guard keeps its jobs) and either started again at
// once, before its fencing deadline — it must adopt every job it ran (same
// pid and start), resume its session, leave the generation as it was, and
// no other agent may start those jobs meanwhile — or not started again
// until another agent runs its jobs — its guard must kill every job
// process by the guard's deadline, before the lease can expire, and none
// may be alive once another agent runs the job. Some rounds cut another
// agent meanwhile, or the killed one (just before the kill: its guard,
// not the agent, must then kill in time).

// cutWhom is which agent a kill round cuts from the store.
type cutWhom int

const (
	cutNobody cutWhom = iota
	cutOther          // another agent than the killed one, for 0.3–5 s
	cutVictim         // the killed one, 0–500 ms before the kill
)

// memberKill is the kind of a kill round.
type memberKill struct {
	back bool // started again at once (crash and return); else once another agent runs its jobs
	cut  cutWhom
}

// memberKills are the kinds, each equally often. A victim cut before the
// kill is not started again at once: it could not resume before the
// heal, so whether it adopts would depend on the cut's length.
var memberKills = []memberKill{{true, cutNobody}, {true, cutOther}, {false, cutNobody}, {false, cutOther}, {false, cutVictim}}

func (k memberKill) String() string {
	s := "crash without return"
	if k.back {
		s = "crash and return"
	}
	switch k.cut {
	case cutOther:
		s += ", another agent cut"
	case cutVictim:
		s += ", cut first"
	}
	return s
}

// killRound is what one kill round did and saw.
type killRound struct {
	round  int
	kind   memberKill
	victim string
	cut    string // the agent cut during the round; "" none
	killAt time.Time
	jobs   int // the victim's own jobs

	// crash and return
	adopted    int           // of the victim's jobs, adopted: same pid and start
	resumed    bool          // the new agent resumed the session
	genChecked bool          // no cut in the round: the generation must not change
	genSame    bool          // it did not
	elsewhere  int           // workers of the victim's jobs that first stamped after the kill
	toAdopted  time.Duration // from the new agent's exec to every job of the victim adopted

	// crash without return
	late      time.Duration // the guard's kill after its deadline (its log)
	takeover  time.Duration // from the SIGKILL to every job of the victim stamped by another agent
	survivors int           // processes of the victim's jobs alive once another agent ran them

	settle time.Duration // from the end of the round to every agent running its own jobs
}

func (r killRound) String() string {
	s := fmt.Sprintf("round %3d: %s SIGKILLed (%s", r.round, r.victim, r.kind)
	if r.cut != "" {
		s += ": " + r.cut
	}
	s += "), "
	if r.kind.back {
		s += fmt.Sprintf("%d of %d jobs adopted %s after the new agent's exec, resumed %v", r.adopted, r.jobs, r.toAdopted.Round(time.Millisecond), r.resumed)
	} else {
		s += fmt.Sprintf("guard killed %s after its deadline, %d jobs on another agent %s after the kill, %d survivors",
			r.late, r.jobs, r.takeover.Round(time.Millisecond), r.survivors)
	}
	return s + fmt.Sprintf(", settled %s after", r.settle.Round(time.Millisecond))
}

// killRound runs kill round i of kind k; it returns the round and the cut
// it made (nil: none).
func (w *world) killRound(i int, rng *rand.Rand, k memberKill) (killRound, *cutRound) {
	t := w.t
	t.Helper()
	var homes, others []*member
	for _, m := range w.agents {
		if len(m.home) > 0 {
			homes = append(homes, m)
		}
	}
	v := homes[rng.IntN(len(homes))]
	for _, m := range w.agents {
		if m != v {
			others = append(others, m)
		}
	}
	r := killRound{round: i, kind: k, victim: v.id, jobs: len(v.home)}
	var cm *member
	switch k.cut {
	case cutOther:
		cm = others[rng.IntN(len(others))]
	case cutVictim:
		cm = v
	}
	// The published assignment's generation, read from the store before
	// any cut.
	var asg api.Assignment
	if err := get(v.addr, "/v1/assignment", &asg); err != nil {
		t.Fatalf("round %d: assignment before the kill: %v", i, err)
	}
	var cut *pendingCut
	if cm != nil {
		c := w.cut(i, cm, []cutMode{linkDown, dropAll}[rng.IntN(2)])
		c.inKill = true
		cut = &pendingCut{w: w, m: cm, r: &c, length: 300*time.Millisecond + uniform(rng, 4700*time.Millisecond)}
		r.cut = cm.id
		// Before the victim's own fencing (its last renewal + 1 s, at
		// least 667 ms after the cut): the guard must do the killing.
		time.Sleep(uniform(rng, 500*time.Millisecond))
	}

	before, err := jobsOf(v.addr)
	if err != nil {
		t.Fatalf("round %d: jobs of %s before the kill: %v", i, v.id, err)
	}
	g := guardLogOf(filepath.Join(v.file.dir, "data"))
	seen := g.kills()
	// Kill right after a fresh answer of the agent: its last renewal as
	// reported then is at most one renewal (333 ms) older than the real
	// one, which can only make the check of its workers stricter.
	if _, ok := v.poller.next(time.Now(), 10*time.Second); !ok {
		t.Fatalf("round %d: agent %s did not answer within 10 s before the kill", i, v.id)
	}
	pid := v.proc.pid
	r.killAt = time.Now()
	v.proc.kill()
	var lastRenewal time.Time
	for _, s := range v.poller.of(pid) {
		if s.lastRenewal.After(lastRenewal) {
			lastRenewal = s.lastRenewal
		}
	}

	if k.back {
		w.comeBack(&r, rng, v, before, asg.Generation, seen, cm == nil)
	} else {
		w.stayAway(&r, v, g, seen, lastRenewal, cut)
	}
	if cut != nil {
		if d := cut.length - time.Since(cut.r.cutAt); d > 0 {
			time.Sleep(d) // the rest of the cut's length
		}
		cut.healIfDue()
	}
	if !k.back {
		v.start()
	}
	r.settle = w.settle(2 * time.Minute)
	if cut == nil {
		return r, nil
	}
	cut.r.settle = r.settle
	return r, cut.r
}

// pendingCut is a kill round's cut of agent m, healed once it has lasted
// length, whatever the round waits for meanwhile (the agent cut may be
// the one that must take the killed agent's jobs).
type pendingCut struct {
	w      *world
	m      *member
	r      *cutRound
	length time.Duration
	healed bool
}

// healIfDue heals the cut if it has lasted its length (c nil: no cut).
func (c *pendingCut) healIfDue() {
	if c != nil && !c.healed && time.Since(c.r.cutAt) >= c.length {
		c.w.heal(c.m, c.r)
		c.healed = true
	}
}

// comeBack starts the killed agent v again within 200 ms and checks that
// it adopts the jobs it ran (before: its jobs before the kill), resumes its
// session, and, when nothing was cut (same), leaves the published
// assignment's generation gen as it was; and that no worker of its jobs started meanwhile, here or on
// another agent. seen is the guard's kill count before the kill.
func (w *world) comeBack(r *killRound, rng *rand.Rand, v *member, before map[string]api.Job, gen int64, seen int, same bool) {
	t := w.t
	time.Sleep(uniform(rng, 200*time.Millisecond))
	v.start()
	a := v.proc
	var ag api.Agent
	var js map[string]api.Job
	if !testutil.Poll(60*time.Second, func() bool {
		if !a.running() || get(v.addr, "/v1/agent", &ag) != nil || ag.PID != a.pid || ag.State != "member" {
			return false
		}
		var err error
		if js, err = jobsOf(v.addr); err != nil {
			return false
		}
		for _, id := range v.home {
			if j, ok := js[id]; !ok || j.State != worker.Running || j.PID == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("round %d: %s, SIGKILLed and started again, does not run its jobs within 60 s (running %v, %v): %s\n%s",
			r.round, v.id, a.running(), a.err, describe(js), a.out.tail(40))
	}
	r.toAdopted = time.Since(a.start)
	checked := time.Now()
	for _, id := range v.home {
		b, j := before[id], js[id]
		if b.PID != 0 && j.PID == b.PID && b.StartedAt != nil && j.StartedAt != nil && j.StartedAt.Equal(*b.StartedAt) {
			r.adopted++
			continue
		}
		t.Errorf("round %d: %s's job %s ran pid %d (started %v) before the SIGKILL, pid %d (started %v) after the agent's restart: not adopted",
			r.round, v.id, id, b.PID, b.StartedAt, j.PID, j.StartedAt)
	}
	r.resumed = a.out.count(`"joined the cluster" resumed=true`) > 0
	if !r.resumed {
		t.Errorf("round %d: %s, started again %s after its SIGKILL, did not resume its session:\n%s",
			r.round, v.id, a.start.Sub(r.killAt).Round(time.Millisecond), strings.Join(a.out.matching("joined the cluster"), "\n"))
	}
	if n := guardLogOf(filepath.Join(v.file.dir, "data")).kills(); n > seen {
		t.Errorf("round %d: %s's lease guard killed its jobs before the agent started %s after the SIGKILL took them over",
			r.round, v.id, a.start.Sub(r.killAt).Round(time.Millisecond))
	}
	if r.genChecked = same; same {
		var asg api.Assignment
		err := get(v.addr, "/v1/assignment", &asg)
		r.genSame = err == nil && asg.Generation == gen
		if !r.genSame {
			t.Errorf("round %d: the assignment's generation is %d (%v) after %s's restart, %d before its SIGKILL", r.round, asg.Generation, err, v.id, gen)
		}
	}
	// No worker of the victim's jobs started between the kill and now:
	// not here (the jobs were adopted), not on another agent.
	for _, id := range v.home {
		ss, err := testutil.ReadStamps(filepath.Join(w.stamps, id+".log"))
		if err != nil {
			t.Errorf("round %d: job %s: %v", r.round, id, err)
			continue
		}
		for _, iv := range testutil.Intervals(ss) {
			if iv.First >= r.killAt.UnixNano() && iv.First <= checked.UnixNano() {
				r.elsewhere++
				t.Errorf("round %d: job %s of %s, SIGKILLed and started again, got a new worker meanwhile: %s", r.round, id, v.id, iv)
			}
		}
	}
}

// stayAway leaves the killed agent v down until another agent runs every
// job of it: its guard (whose log is g, with seen kills before the kill)
// must kill them all, and none of their processes may be alive then. The
// session it held is recorded as a crash for the verdict (world.judge),
// with lastRenewal, its last renewal as last reported. The round's cut
// (nil: none) is healed when due meanwhile.
func (w *world) stayAway(r *killRound, v *member, g guardLog, seen int, lastRenewal time.Time, cut *pendingCut) {
	t := w.t
	var others []*member
	for _, m := range w.agents {
		if m != v {
			others = append(others, m)
		}
	}
	w.crashes = append(w.crashes, crash{agent: v.id, at: r.killAt, lastRenewal: lastRenewal})
	late, ok := g.waitKill(seen, 30*time.Second)
	switch {
	case !ok:
		t.Errorf("round %d: %s's lease guard logged no kill within 30 s of the agent's SIGKILL", r.round, v.id)
	case late >= guardLag(w.ttl):
		// Its deadline is the agent's plus guardLag; the lease's
		// earliest expiry guardLag after that.
		t.Errorf("round %d: %s's lease guard killed %s after its deadline: not before the lease could expire", r.round, v.id, late)
	}
	r.late = late
	var where map[string]string
	if !testutil.Poll(60*time.Second, func() bool {
		cut.healIfDue()
		where = map[string]string{}
		for _, m := range others {
			js, err := jobsOf(m.addr)
			if err != nil {
				continue
			}
			for _, id := range v.home {
				if j, ok := js[id]; ok && j.State == worker.Running && j.PID != 0 && stampedBy(filepath.Join(w.stamps, id+".log"), j.PID) {
					where[id] = m.id
				}
			}
		}
		return len(where) == len(v.home)
	}) {
		var asg api.Assignment
		_ = get(others[0].addr, "/v1/assignment", &asg)
		t.Fatalf("round %d: the jobs of %s, SIGKILLed and not started again, do not run on another agent within 60 s: %v, want %v; assignment %+v\n%s",
			r.round, v.id, where, v.home, asg, w.tails(v))
	}
	r.takeover = time.Since(r.killAt)
	// Another agent runs them: nothing of the victim's runs may live.
	for _, p := range tagged(stamperEnv, w.stamps) {
		if job := jobOfPid(p.pid, v.file.root); job != "" {
			r.survivors++
			t.Errorf("round %d: a process of %s's job %s is alive after the agent's SIGKILL, with the job running on %s: %s in\n%s",
				r.round, v.id, job, where[job], p, cgroupsOf(p.pid))
		}
	}
}

// killRows are the kill rounds' figures for writeFigures, with session
// TTL ttl.
func killRows(ks []killRound, ttl time.Duration) [][2]string {
	var back, away, cutOthers, cutVictims, jobs, adopted, resumed, gens, gensSame, elsewhere, awayJobs, survivors int
	var toAdopted, takeover, lates []time.Duration
	for _, r := range ks {
		switch r.kind.cut {
		case cutOther:
			cutOthers++
		case cutVictim:
			cutVictims++
		}
		if r.kind.back {
			back++
			jobs += r.jobs
			adopted += r.adopted
			elsewhere += r.elsewhere
			toAdopted = append(toAdopted, r.toAdopted)
			if r.resumed {
				resumed++
			}
			if r.genChecked {
				gens++
				if r.genSame {
					gensSame++
				}
			}
			continue
		}
		away++
		awayJobs += r.jobs
		survivors += r.survivors
		takeover = append(takeover, r.takeover)
		lates = append(lates, r.late)
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return [][2]string{
		{"SIGKILLs of an agent (kill rounds)", fmt.Sprintf("%d: %d started again at once, %d not until another agent ran its jobs; %d with another agent cut, %d cut just before", len(ks), back, away, cutOthers, cutVictims)},
		{"started again: jobs adopted (same pid and start); sessions resumed; generation unchanged (rounds without a cut)", fmt.Sprintf("%d of %d; %d of %d; %d of %d", adopted, jobs, resumed, back, gensSame, gens)},
		{"started again: workers of its jobs started meanwhile, here or on another agent", fmt.Sprint(elsewhere)},
		{"started again: new agent's exec to every job adopted (median, max)", fmt.Sprintf("%s, %s", ms(percentile(toAdopted, 50)), ms(percentile(toAdopted, 100)))},
		{fmt.Sprintf("not started again: the guard's kill after its deadline (the agent's deadline + %s; the lease's earliest expiry %s after it) (median, max)", ms(guardLag(ttl)), ms(guardLag(ttl))),
			fmt.Sprintf("%s, %s", percentile(lates, 50).Round(10*time.Microsecond), percentile(lates, 100).Round(10*time.Microsecond))},
		{"not started again: processes of its jobs alive once another agent ran them", fmt.Sprintf("%d (of %d jobs taken over)", survivors, awayJobs)},
		{"not started again: SIGKILL to every job of it running on another agent (median, max)", fmt.Sprintf("%s, %s", ms(percentile(takeover, 50)), ms(percentile(takeover, 100)))},
	}
}
