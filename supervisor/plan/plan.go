package plan

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
)

// Phase is where one assigned job stands on this agent, apart from its
// worker's own state (worker.State says whether a running job's process is
// starting, running, backing off or exited).
type Phase uint8

// The phases of a job. A job enters the agent's table in one of them when
// a pass plans it (Plan) and leaves it when it is stopped and forgotten;
// the supervisor lists the few moves a job makes in place.
const (
	// Waiting: another member holds the job's claim, or the claim could
	// not be taken (the store failed); retried with backoff.
	Waiting Phase = iota + 1
	// Failed: the job could not be started (its cgroup, its limits or its
	// env_file); permanent failures wait for a reload or a new definition,
	// the others are retried with backoff.
	Failed
	// Running: the job holds its claim and has a worker in its cgroup.
	Running
	// Held: the job's connector is paused or stopped (its target state):
	// no worker, no cgroup, no claim.
	Held
	// Restarting: the job is being stopped to carry out a restart request;
	// a new start replaces it.
	Restarting
)

var phaseNames = [...]string{Waiting: "waiting", Failed: "failed", Running: "running", Held: "held", Restarting: "restarting"}

// String is the phase's name, as logs say it.
func (p Phase) String() string {
	if int(p) < len(phaseNames) && phaseNames[p] != "" {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", p)
}

// Current is one job in the agent's table as Decide sees it.
type Current struct {
	// Spec is the definition the job runs (or failed to start with).
	Spec spec.Job
	// Phase is where the job stands; Target is a Held job's target state.
	Phase  Phase
	Target spec.TargetState
	// Worker is the job's worker status (State 0 when it has none).
	Worker worker.Status
	// Permanent says a Failed job's error cannot heal by waiting.
	Permanent bool
	// RetryDue says the backoff of a Failed or Waiting job has passed.
	RetryDue bool
}

// live reports whether the job has a worker whose process runs or starts.
func (c Current) live() bool {
	return c.Phase == Running && (c.Worker.State == worker.Running || c.Worker.State == worker.Starting)
}

// connectState is the job's state in Kafka Connect's words (RUNNING,
// FAILED, ...), as restart requests with only_failed (KIP-745) test it.
func (c Current) connectState() string {
	switch c.Phase {
	case Held:
		if c.Target == spec.TargetPaused {
			return "PAUSED"
		}
		return "STOPPED"
	case Waiting:
		return "UNASSIGNED"
	case Failed:
		return "FAILED"
	case Restarting:
		return "RESTARTING"
	}
	switch c.Worker.State {
	case worker.Running:
		return "RUNNING"
	case worker.Failed:
		return "FAILED"
	case worker.Exited:
		if c.Worker.LastExit != nil && c.Worker.LastExit.Code != 0 {
			return "FAILED"
		}
		return "STOPPED"
	case worker.Stopping, worker.Stopped:
		return "STOPPED"
	}
	return "RESTARTING"
}

// Input is everything one pass decides from.
type Input struct {
	// Want maps each job assigned here that has a definition to it (its
	// env_file's values already merged into its environment).
	Want map[string]spec.Job
	// Targets maps a connector to the target state operators set; absent
	// means running.
	Targets map[string]spec.Target
	// Restarts maps a job to its pending restart request.
	Restarts map[string]spec.RestartRequest
	// Handled maps a job to the revision of the restart request this agent
	// has carried out already (its removal from the store may have failed).
	Handled map[string]int64
	// Current is the agent's table of jobs.
	Current map[string]Current
	// EnvErrs says, by job, why a job's env_file cannot be read.
	EnvErrs map[string]error
	// RetryFailed (a reload) tries every failed job again, permanent
	// failures included: the operator may have fixed what was missing.
	RetryFailed bool
	// CanStart checks a new definition against this host (user, program,
	// working directory) before a running job is stopped for it; nil
	// accepts every definition.
	CanStart func(spec.Job) error
	// Inherited is what an earlier agent left this one's jobs, given to
	// the first pass that knows the whole assignment and to no other:
	// that pass adopts, resumes or discards every run and wait in it.
	Inherited Inherited
	// Fingerprint is the command fingerprint of a job's definition as its
	// worker would run it (worker.Fingerprint), compared with an inherited
	// run's or wait's; required when Inherited is not empty.
	Fingerprint func(spec.Job) string
}

// Inherited is what an earlier agent on this data_dir left the jobs of
// this one (package handover loads it at start), by job ID: the runs the
// lease guard holds that passed their identity checks, one per job, and
// the jobs that waited to restart, with their backoff.
type Inherited struct {
	Runs  map[string]worker.Adoptable
	Waits map[string]worker.Pending
}

// Empty reports whether nothing is inherited.
func (h Inherited) Empty() bool { return len(h.Runs) == 0 && len(h.Waits) == 0 }

// Adopt is a job to start by taking over the run an earlier agent started
// with the same command (worker.Adopt: the same pid, start time, restart
// count and log), once its claim is taken.
type Adopt struct {
	Job spec.Job
	Run worker.Adoptable
}

// Resume is a job to start by carrying on the backoff it waited out under
// an earlier agent with the same command (worker.Resume: the same restart
// count, last exit and due time), once its claim is taken.
type Resume struct {
	Job  spec.Job
	Wait worker.Pending
}

// DiscardReason says why Decide discards what a job inherited.
type DiscardReason uint8

// Why an inherited run or wait is discarded.
const (
	// DiscardGone: the job is not assigned here (deleted, or another
	// member's) or has no definition.
	DiscardGone DiscardReason = iota + 1
	// DiscardChanged: the job's command changed while no agent ran: it
	// starts anew.
	DiscardChanged
	// DiscardHeld: the job's connector is paused or stopped.
	DiscardHeld
	// DiscardNotStarted: the job does not start in this pass (its
	// env_file cannot be read, or it has a worker already).
	DiscardNotStarted
	// DiscardHasRun: a wait of a job that has an inherited run (the run
	// wins: a crash came between its start and the wait's removal).
	DiscardHasRun
	// DiscardOlderClaim: the run's fencing token is older than the job's
	// claim, made anew since the run started (its lease expired while the
	// run lived on): another member may have run the job meanwhile, so
	// the run starts anew with a token of the claim. The executor finds
	// it, once the claim is read.
	DiscardOlderClaim
)

var discardNames = [...]string{DiscardGone: "the job is not assigned here", DiscardChanged: "the job's command changed",
	DiscardHeld: "the job's connector is held", DiscardNotStarted: "the job does not start", DiscardHasRun: "the job has a run",
	DiscardOlderClaim: "the run's fencing token is older than the job's claim"}

// String says the reason as logs say it.
func (r DiscardReason) String() string {
	if int(r) < len(discardNames) && discardNames[r] != "" {
		return discardNames[r]
	}
	return fmt.Sprintf("discard(%d)", r)
}

// Discard is an inherited run or wait that no job of this agent takes:
// the run's cgroup is killed and removed and the guard forgets it; the
// wait's note is dropped.
type Discard struct {
	ID     string
	Reason DiscardReason
	// Run is the run to kill; Wait the wait to drop; one of them is set.
	Run  *worker.Adoptable
	Wait *worker.Pending
}

// StopReason says why Decide stops a job.
type StopReason uint8

// Why a job is stopped.
const (
	// StopRemoved: the job is no longer assigned here (or no longer defined).
	StopRemoved StopReason = iota + 1
	// StopChanged: its new definition needs a new process (needsRestart).
	StopChanged
	// StopHeld: its connector was paused or stopped.
	StopHeld
	// StopRequested: a restart request is carried out (stop, then start).
	StopRequested
	// StopRetry: a reload retries a job whose worker failed to start.
	StopRetry
)

// Stop is one job to stop: every process gone, its cgroup removed, its
// claim released.
type Stop struct {
	ID     string
	Reason StopReason
	// New is the definition that replaces the job (StopChanged).
	New spec.Job
}

// Block is a running job whose new definition cannot start on this host:
// it keeps running its previous definition, with Err as the reason.
type Block struct {
	ID  string
	New spec.Job
	Err error
}

// Hold is a wanted job held by its connector's target state.
type Hold struct {
	Job    spec.Job
	Target spec.Target
}

// EnvFailure is a job whose env_file cannot be read: it is not started.
type EnvFailure struct {
	Job spec.Job
	Err error
}

// Note is a decision about a restart request worth one log line.
type Note struct {
	Request spec.RestartRequest
	Msg     string
}

// Plan is what one pass does, in this order: stops (all at once),
// discards of inherited runs and waits, sharing groups' cgroups, holds,
// env failures, starts, adoptions and resumptions (claims first),
// in-place updates, then the restart requests' removal from the store.
type Plan struct {
	Stop      []Stop
	Block     []Block
	Hold      []Hold
	EnvFailed []EnvFailure
	Start     []spec.Job
	// Adopt and Resume are jobs that start by taking over what they
	// inherited (Input.Inherited); Discard what no job takes. Every
	// inherited run and wait is in exactly one of them.
	Adopt   []Adopt
	Resume  []Resume
	Discard []Discard
	// InheritedGroups are the sharing groups whose cgroup an earlier agent
	// made (a wanted job of theirs has an inherited run): their limits
	// are written as over an adopted job's cgroup, every limit the
	// definition does not set as the kernel's default.
	InheritedGroups map[string]bool
	Update          []spec.Job
	// Restart are the requests carried out in this pass (their jobs are in
	// Stop and Start); Done the requests handled without a restart (held,
	// not FAILED with only_failed, starting anyway, carried out before).
	Restart map[string]spec.RestartRequest
	Done    []spec.RestartRequest
	Notes   []Note
	// Handled is Input.Handled without the requests that are gone from
	// the store or were replaced by a newer one.
	Handled map[string]int64
	// Before is each wanted job's target state before the pass ("" for a
	// job new here), to log what the pass changed.
	Before map[string]spec.TargetState
	// Held maps each held wanted job to its target.
	Held map[string]spec.Target
}

// TargetOf is connector's target in targets; running when none is set.
func TargetOf(targets map[string]spec.Target, connector string) spec.Target {
	t, ok := targets[connector]
	if !ok || t.State == "" {
		t.State = spec.TargetRunning
	}
	return t
}

// Decide plans one pass. Rules (docs/design.md, "A job's life"):
//   - a job no longer wanted is stopped; a held job's placeholder too;
//   - a definition that needs a new process (needsRestart) stops the job
//     and starts it anew, unless the job runs and the new definition
//     cannot start here (CanStart): then the old one keeps running
//     (Block); a change of limits, restart policy or stop timeout alone is
//     an in-place update;
//   - a paused or stopped connector's jobs are stopped and held; resumed,
//     they start;
//   - a restart request is carried out once (stop, then start) unless the
//     job is held, starts anyway, or is not FAILED with only_failed;
//   - a Failed or Waiting job starts again when its backoff is due (not a
//     permanent failure), its definition changed, or on reload;
//   - a job that starts adopts the run it inherited when the run's
//     command fingerprint is the job's (else the run is discarded and the
//     job starts anew), or resumes the wait it inherited on the same
//     terms; every other inherited run and wait is discarded.
func Decide(in Input) Plan {
	p := Plan{Restart: map[string]spec.RestartRequest{}, Handled: map[string]int64{},
		Before: map[string]spec.TargetState{}, Held: map[string]spec.Target{}, InheritedGroups: map[string]bool{}}
	for id, rev := range in.Handled {
		if r, ok := in.Restarts[id]; ok && r.Rev == rev {
			p.Handled[id] = rev
		}
	}
	for id, j := range in.Want {
		if t := TargetOf(in.Targets, j.Connector); t.State != spec.TargetRunning {
			p.Held[id] = t
		}
		switch cur, ok := in.Current[id]; {
		case !ok:
			p.Before[id] = ""
		case cur.Phase == Held:
			p.Before[id] = cur.Target
		default:
			p.Before[id] = spec.TargetRunning
		}
	}
	decideRestarts(in, &p)

	// Stops, in ID order.
	blocked := map[string]bool{}
	stopped := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(in.Current)) {
		cur := in.Current[id]
		nj, ok := in.Want[id]
		_, hold := p.Held[id]
		restart := ok && needsRestart(cur.Spec, nj)
		if restart && !hold && cur.live() && in.CanStart != nil {
			if err := in.CanStart(nj); err != nil {
				p.Block = append(p.Block, Block{ID: id, New: nj, Err: err})
				blocked[id] = true
				delete(p.Restart, id) // a requested restart waits for a definition that can start
				continue
			}
		}
		_, requested := p.Restart[id]
		var why StopReason
		switch {
		case !ok:
			why = StopRemoved
		case hold && cur.Phase != Held:
			why = StopHeld
		case restart && !hold && cur.Phase != Held:
			why = StopChanged
		case restart:
			why = StopRemoved // a held placeholder whose definition changed: made anew
		case requested:
			why = StopRequested
		case in.RetryFailed && cur.Phase == Running && cur.Worker.State == worker.Failed:
			why = StopRetry
		default:
			continue
		}
		p.Stop = append(p.Stop, Stop{ID: id, Reason: why, New: nj})
		stopped[id] = true
	}

	// Holds, env failures, starts and updates, in ID order.
	for _, id := range slices.Sorted(maps.Keys(in.Want)) {
		if blocked[id] {
			continue // runs its previous definition
		}
		nj := in.Want[id]
		if t, held := p.Held[id]; held {
			p.Hold = append(p.Hold, Hold{Job: nj, Target: t})
			continue
		}
		cur, ok := in.Current[id]
		if stopped[id] {
			ok = false
		}
		switch {
		case in.EnvErrs[id] != nil:
			p.EnvFailed = append(p.EnvFailed, EnvFailure{Job: nj, Err: in.EnvErrs[id]})
		case !ok || cur.Phase == Held:
			p.start(in, nj)
		case cur.Phase == Failed || cur.Phase == Waiting:
			if in.RetryFailed || (!cur.Permanent && cur.RetryDue) || !reflect.DeepEqual(cur.Spec, nj) {
				p.start(in, nj) // replaces cur
			}
		default:
			p.Update = append(p.Update, nj)
		}
	}
	p.discardRest(in)
	return p
}

// start plans the start of wanted job j: adopt the run it inherited if
// the run's command is j's, else resume the wait it inherited on the
// same terms, else start a new run; what j inherited and does not take
// is discarded.
func (p *Plan) start(in Input, j spec.Job) {
	run, hasRun := in.Inherited.Runs[j.ID]
	wait, hasWait := in.Inherited.Waits[j.ID]
	if !hasRun && !hasWait {
		p.Start = append(p.Start, j)
		return
	}
	fp := in.Fingerprint(j)
	switch {
	case hasRun && run.Run.Fingerprint == fp:
		p.Adopt = append(p.Adopt, Adopt{Job: j, Run: run})
	case hasRun:
		p.Discard = append(p.Discard, Discard{ID: j.ID, Reason: DiscardChanged, Run: &run})
		p.Start = append(p.Start, j)
	case wait.Fingerprint == fp:
		p.Resume = append(p.Resume, Resume{Job: j, Wait: wait})
		return
	default:
		p.Discard = append(p.Discard, Discard{ID: j.ID, Reason: DiscardChanged, Wait: &wait})
		p.Start = append(p.Start, j)
		return
	}
	if hasWait {
		p.Discard = append(p.Discard, Discard{ID: j.ID, Reason: DiscardHasRun, Wait: &wait})
	}
}

// discardRest discards every inherited run and wait that no start took
// (start), in job ID order, and names the sharing groups whose cgroups
// were inherited.
func (p *Plan) discardRest(in Input) {
	if in.Inherited.Empty() {
		return
	}
	taken := map[string]bool{}
	for _, a := range p.Adopt {
		taken[a.Job.ID] = true
	}
	for _, r := range p.Resume {
		taken[r.Job.ID] = true
	}
	for _, d := range p.Discard {
		taken[d.ID] = true
	}
	why := func(id string) DiscardReason {
		_, held := p.Held[id]
		switch _, wanted := in.Want[id]; {
		case !wanted:
			return DiscardGone
		case held:
			return DiscardHeld
		}
		return DiscardNotStarted
	}
	ids := slices.Sorted(maps.Keys(in.Inherited.Runs))
	for id := range in.Inherited.Waits {
		if _, ok := in.Inherited.Runs[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if j, ok := in.Want[id]; ok && j.Group != "" {
			if _, run := in.Inherited.Runs[id]; run {
				if _, held := p.Held[id]; !held {
					p.InheritedGroups[j.Group] = true
				}
			}
		}
		if taken[id] {
			continue
		}
		if run, ok := in.Inherited.Runs[id]; ok {
			p.Discard = append(p.Discard, Discard{ID: id, Reason: why(id), Run: &run})
		}
		if wait, ok := in.Inherited.Waits[id]; ok {
			r := why(id)
			if _, ok := in.Inherited.Runs[id]; ok {
				r = DiscardHasRun
			}
			p.Discard = append(p.Discard, Discard{ID: id, Reason: r, Wait: &wait})
		}
	}
	slices.SortStableFunc(p.Discard, func(a, b Discard) int { return strings.Compare(a.ID, b.ID) })
}

// decideRestarts sorts the restart requests for wanted jobs into those
// carried out now (p.Restart) and those handled without a restart (p.Done,
// with a note saying why). Requests for jobs other agents run are theirs.
func decideRestarts(in Input, p *Plan) {
	for _, id := range slices.Sorted(maps.Keys(in.Restarts)) {
		r := in.Restarts[id]
		if _, ok := in.Want[id]; !ok {
			continue
		}
		if rev, ok := p.Handled[id]; ok && rev == r.Rev {
			p.Done = append(p.Done, r)
			continue
		}
		cur, ok := in.Current[id]
		var msg string
		switch t, held := p.Held[id]; {
		case held:
			msg = "restart request not carried out: the connector is " + string(t.State)
		case !ok || cur.Phase == Held:
			msg = "restart request: the job starts now"
		case r.OnlyFailed && cur.connectState() != "FAILED":
			msg = "restart request not carried out: only failed jobs were to restart, and the job is " + cur.connectState()
		default:
			p.Restart[id] = r
			continue
		}
		p.Notes = append(p.Notes, Note{Request: r, Msg: msg})
		p.Done = append(p.Done, r)
	}
}

// needsRestart reports whether going from old to new needs a new process
// (and a new cgroup): anything but the limits changed, or the cpuset was
// removed. A limit that is added, changed or removed is written in place
// (a removed one as the kernel's default, limits.Lift, as systemd does
// when a property is removed and the unit reloaded); a removed cpuset has
// no such value in every controller (a v1 cpuset child has no "the
// parent's"), so the job's cgroup is made anew.
//
// The restart policy, the stop timeout, the kill mode and the stop signal
// do not touch the running process either: they are handed to its worker
// (worker.Retune) and take effect at its next exit or stop, as systemd
// applies Restart=, TimeoutStopSec=, KillMode= and KillSignal= on
// daemon-reload. Everything else of the process
// (command, environment, env_file, user, working directory) needs a new
// one.
func needsRestart(old, new spec.Job) bool {
	o, n := old.Process, new.Process
	o.Limits, n.Limits = limits.Limits{}, limits.Limits{}
	o.Restart, n.Restart = "", ""
	o.StopTimeout, n.StopTimeout = 0, 0
	o.KillMode, n.KillMode, o.KillSignal, n.KillSignal = "", "", "", ""
	return old.Group != new.Group || !reflect.DeepEqual(o, n) || limits.CpusetRemoved(old.Process.Limits, new.Process.Limits)
}
