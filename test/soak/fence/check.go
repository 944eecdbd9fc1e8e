package fence

import (
	"fmt"
	"time"
)

// ViolationKind is a way in which a history shows that a resource fenced
// by token could have taken a write it must not have.
type ViolationKind int

const (
	// AcceptedOutOfOrder: the fence accepted a write of a run after it
	// had accepted one of a later run of the same job. A fence that keeps
	// the highest token does so only when the older run's token was not
	// smaller: the zombie's write went through.
	AcceptedOutOfOrder ViolationKind = iota
	// RunWithoutToken: a run wrote without a token (or with one that is
	// not a decimal integer): no resource can fence it.
	RunWithoutToken
	// SharedToken: two runs of a job carried the same token; the fence
	// takes them for one run and accepts both.
	SharedToken
	// SmallerLaterToken: a run that began after another run of the job
	// carried a smaller token: the fence would reject the newer run (a job
	// locked out of its resource) or, before the newer run's first write,
	// accept the older one's.
	SmallerLaterToken
	// TokenChanged: the processes of one run wrote with different tokens
	// (an adopted run must keep its token).
	TokenChanged
	numViolationKinds
)

func (k ViolationKind) String() string {
	return [...]string{"write accepted out of token order", "run without a token", "two runs sharing a token",
		"later run with a smaller token", "run whose token changed"}[k]
}

// ViolationKinds lists every kind, in the order of the report.
func ViolationKinds() []ViolationKind {
	out := make([]ViolationKind, numViolationKinds)
	for i := range out {
		out[i] = ViolationKind(i)
	}
	return out
}

// Violation is one breach, with the round in whose span it showed.
type Violation struct {
	Kind   ViolationKind
	Job    string
	Round  int // -1: before the first round
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("round %d, job %s: %s: %s", v.Round, v.Job, v.Kind, v.Detail)
}

// Round is what the checker saw in the span of one fault round: from its
// begin line to the next round's (attempts after a round's end, before
// the next begins, still count for it: a zombie of that round may write
// then).
type Round struct {
	Index int    // -1: the span before the first round
	Fault string // the fault kind; "" before the first round
	// Begin and End are the round's begin and end lines' times
	// (CLOCK_BOOTTIME); End is 0 when the history has no end line for it.
	Begin, End time.Duration
	Attempts   int // writes sent
	Accepted   int // of them, accepted by the fence (a tokenless one as an unfenced store would)
	// Stale are the attempts the fence rejected, StaleRule those of them
	// from jobs that follow the claim rule.
	Stale, StaleRule int
	// Zombie are the attempts of a run older than the newest run of the
	// job already seen to write, whatever the fence did with them:
	// Stale, plus any accepted out of order, plus tokenless ones an
	// unfenced store would have taken. ZombieRule: from rule-following
	// jobs.
	Zombie, ZombieRule int
	Held               int // writes held back by the claim rule
	NewRuns            int // runs whose first attempt came in the round
	TokenlessRuns      int // of them, without a token
	// Overlaps are the pairs of runs of one job that wrote at once: an
	// attempt of the older arrived after the newer's first.
	Overlaps int
	// MaxGap is the longest time, over every job, between two accepted
	// writes of the job where the second came in the round: the longest
	// stretch with no accepted writer (failover). MaxGapJob is that job.
	MaxGap     time.Duration
	MaxGapJob  string
	Violations int
}

// run is one run of a job, as its attempts show it.
type run struct {
	id       string
	seq      int           // order of first attempt within its job
	start    time.Duration // its run-start field
	agent    string
	token    string // of its first attempt
	value    uint64
	hasToken bool
	changed  bool // its token changed (reported once)
	round    int  // the round of its first attempt
}

// later reports whether run a began after run b: a later start, or, at
// the same start (the clock's resolution), a later first attempt.
func later(a, b *run) bool {
	return a.start > b.start || a.start == b.start && a.seq > b.seq
}

func (r *run) String() string {
	return fmt.Sprintf("run %s of %s (started %s, token %s)", r.id, r.agent, r.start, r.token)
}

// job is one job's state in the replay: its runs and its fence.
type job struct {
	runs   []*run
	byID   map[string]*run
	pairs  map[[2]int]bool // overlapping (older, newer) run seqs counted
	high   uint64          // the fence: highest token accepted
	fenced bool            // high is set
	newest *run            // the latest-beginning run seen to write
	// newestAccepted is the latest-beginning run with an accepted write.
	newestAccepted *run
	lastAccepted   time.Duration // of the last accepted write (never decreasing)
	accepted       bool          // lastAccepted is set
}

// Checker replays a history, record by record in arrival order, as a
// resource that fences every job by token: it accepts a write whose token
// is at least the highest it has accepted for the job (the same token
// being the same run), rejects any other, and checks every breach listed
// by ViolationKind. A write without a token cannot be fenced: it is a
// breach (RunWithoutToken) and is then accepted as an unfenced store
// would, so that the overlaps, zombies and gaps of such a history still
// say what that store saw. The zero Checker is not ready: use NewChecker.
type Checker struct {
	jobs       map[string]*job
	rounds     []Round // rounds[0] is the span before the first round
	counts     [numViolationKinds]int
	violations []Violation
	// Keep is how many violations are kept with their details (every one
	// is counted); NewChecker sets 1,000.
	Keep int
}

// NewChecker returns a Checker at the start of a history.
func NewChecker() *Checker {
	return &Checker{jobs: map[string]*job{}, rounds: []Round{{Index: -1}}, Keep: 1000}
}

func (c *Checker) cur() *Round { return &c.rounds[len(c.rounds)-1] }

// Feed takes the next record of the history.
func (c *Checker) Feed(r Record) {
	switch r.Kind {
	case Begin:
		c.rounds = append(c.rounds, Round{Index: r.Round, Fault: r.Fault, Begin: r.At})
	case End:
		if cur := c.cur(); cur.Index == r.Round {
			cur.End = r.At
		}
	case Held:
		c.cur().Held++
	case Attempt:
		c.attempt(r)
	}
}

func (c *Checker) breach(k ViolationKind, j string, format string, args ...any) {
	c.counts[k]++
	c.cur().Violations++
	if len(c.violations) < c.Keep {
		c.violations = append(c.violations, Violation{Kind: k, Job: j, Round: c.cur().Index, Detail: fmt.Sprintf(format, args...)})
	}
}

func (c *Checker) attempt(r Record) {
	rd := c.cur()
	rd.Attempts++
	j := c.jobs[r.Job]
	if j == nil {
		j = &job{byID: map[string]*run{}, pairs: map[[2]int]bool{}}
		c.jobs[r.Job] = j
	}
	value, hasToken := r.TokenValue()
	x := j.byID[r.Run]
	if x == nil {
		x = &run{id: r.Run, seq: len(j.runs), start: r.RunStart, agent: r.Agent, token: r.Token, value: value, hasToken: hasToken, round: rd.Index}
		c.newRun(r.Job, j, x)
	} else {
		if x.hasToken != hasToken || x.value != value {
			if !x.changed {
				x.changed = true
				c.breach(TokenChanged, r.Job, "%s wrote with token %s from pid %d (%s)", x, r.Token, r.PID, r.Role)
			}
		}
		// Every run that began later and has written already: they
		// write at once.
		for _, y := range j.runs[x.seq+1:] {
			if later(y, x) {
				c.overlap(j, x, y)
			}
		}
	}
	zombie := j.newest != nil && later(j.newest, x)
	if j.newest == nil || later(x, j.newest) {
		j.newest = x
	}
	if zombie {
		rd.Zombie++
		if r.Rule {
			rd.ZombieRule++
		}
	}

	// The fence.
	accept := true
	if hasToken {
		accept = !j.fenced || value >= j.high
		if accept {
			j.high, j.fenced = value, true
		}
	}
	if !accept {
		rd.Stale++
		if r.Rule {
			rd.StaleRule++
		}
		return
	}
	rd.Accepted++
	if hasToken && j.newestAccepted != nil && later(j.newestAccepted, x) {
		c.breach(AcceptedOutOfOrder, r.Job, "a write of %s (pid %d, %s) accepted after one of %s, which began later",
			x, r.PID, r.Role, j.newestAccepted)
	}
	if j.newestAccepted == nil || later(x, j.newestAccepted) {
		j.newestAccepted = x
	}
	at := max(r.At, j.lastAccepted)
	if j.accepted {
		if gap := at - j.lastAccepted; gap > rd.MaxGap {
			rd.MaxGap, rd.MaxGapJob = gap, r.Job
		}
	}
	j.lastAccepted, j.accepted = at, true
}

// newRun registers run x of job name at its first attempt and checks its
// token against every earlier run's.
func (c *Checker) newRun(name string, j *job, x *run) {
	rd := c.cur()
	rd.NewRuns++
	if !x.hasToken {
		rd.TokenlessRuns++
		if x.token == NoToken {
			c.breach(RunWithoutToken, name, "%s wrote without BERTH_FENCING_TOKEN", x)
		} else {
			c.breach(RunWithoutToken, name, "%s wrote with token %q, not a decimal integer", x, x.token)
		}
	}
	for _, y := range j.runs {
		if x.hasToken && y.hasToken {
			switch {
			case x.value == y.value:
				c.breach(SharedToken, name, "%s and %s", y, x)
			case later(x, y) && x.value < y.value:
				c.breach(SmallerLaterToken, name, "%s began after %s", x, y)
			case later(y, x) && y.value < x.value:
				c.breach(SmallerLaterToken, name, "%s began after %s", y, x)
			}
		}
		// A run that began later wrote first: this one writes beside it.
		if later(y, x) {
			c.overlap(j, x, y)
		}
	}
	j.byID[x.id] = x
	j.runs = append(j.runs, x)
}

// overlap counts the pair (older x, newer y) once.
func (c *Checker) overlap(j *job, x, y *run) {
	k := [2]int{x.seq, y.seq}
	if !j.pairs[k] {
		j.pairs[k] = true
		c.cur().Overlaps++
	}
}

// Rounds returns what each round saw so far, the span before the first
// round first (Index -1).
func (c *Checker) Rounds() []Round { return append([]Round(nil), c.rounds...) }

// Current returns what the latest round (or, before any, the span before
// the first) has seen so far.
func (c *Checker) Current() Round { return *c.cur() }

// Count is how many violations of kind k the history has shown.
func (c *Checker) Count(k ViolationKind) int { return c.counts[k] }

// Violations returns the first Keep violations, in the order seen.
func (c *Checker) Violations() []Violation { return append([]Violation(nil), c.violations...) }
