package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"time"

	"github.com/berthd/berth/spec"

	"golang.org/x/sys/unix"
)

// Spawner starts jobs' processes in another process that stays their
// parent while agents come and go: the lease guard (package guard). With
// one set (Spec.Spawner) a worker starts every run through it, and a
// restarted agent can take over the runs an earlier one started (Adopt,
// live restart: docs/live-restart.md).
type Spawner interface {
	// Spawn starts x inside the cgroup r.Cgroup (relative to the cgroup
	// root) with stdout and stderr on logw, and keeps a copy of logr (the
	// read end of the same pipe, a descriptor the caller keeps too) so
	// that a later agent can read on. It returns
	// the run's record once the image has been exec'd; onExit gets the
	// main process's wait status, once, from a goroutine of the Spawner's
	// (it must not block). Errors are the launcher's (Runtime.Launch) or
	// the Spawner's own (unreachable: the start never happened).
	Spawn(x *Exec, r Run, logw *os.File, logr int, onExit func(unix.WaitStatus)) (Run, error)
	// Adopt has onExit told the wait status of a run an earlier agent
	// started (the run of worker.Adopt): at once if it has already
	// exited.
	Adopt(run Run, onExit func(unix.WaitStatus))
	// Forget drops the Spawner's record of run: its exit has been
	// handled, or the run is not adopted (its cgroup was killed).
	Forget(run Run)
}

// Run is the record of one run a Spawner started: what proves a process
// is the job's when an agent takes it over, and what the worker's status
// carries on across the agent's restart.
type Run struct {
	// ID names the run for its Spawner (assigned by it).
	ID string `json:"id"`
	// JobID is the job's ID.
	JobID string `json:"job_id"`
	// Cgroup is the job's cgroup, relative to the cgroup root.
	Cgroup string `json:"cgroup"`
	// Leaf is the absolute cgroup2 directory the run was started in
	// (cgroup.Group.RunLeaf), "" on a host without cgroup2.
	Leaf string `json:"leaf,omitempty"`
	// Fingerprint is the hash of the job's command (Fingerprint): an
	// agent adopts a run only for the same command.
	Fingerprint string `json:"fingerprint"`
	// PID is the main process's pid.
	PID int `json:"pid"`
	// StartTicks is the main process's start time, clock ticks after boot
	// (proc(5), /proc/PID/stat field 22) as the initial time namespace
	// counts them (boottime.StartTicks), so that agents and guards in
	// different time namespaces compare the same number.
	StartTicks uint64 `json:"start_ticks"`
	// StartedAt is when the run began (Status.StartedAt).
	StartedAt time.Time `json:"started_at"`
	// Restarts is the worker's restart count when the run began
	// (Status.Restarts).
	Restarts int `json:"restarts"`
	// Token is the run's fencing token (Spec.Token, BERTH_FENCING_TOKEN),
	// which an adopted run keeps; 0: none, or a Spawner that did not keep
	// it (a guard of an earlier release, which drops a field it does not
	// know).
	Token uint64 `json:"fencing_token,omitempty"`
}

// Fingerprint hashes what a run of spec executes in cgroup (the job's
// cgroup relative to the cgroup root, as Run.Cgroup names it): command,
// environment, working directory, user and cgroup. Two specs with the
// same fingerprint start the same process, so a run of one may be adopted
// for the other. Limits and stop settings are not part of it: they change
// in place.
func Fingerprint(spec *Spec, cgroup string) string {
	b, _ := json.Marshal([]any{spec.JobID, spec.Path, spec.Args, spec.Env, spec.Dir, spec.User, cgroup})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Adoptable is a run an earlier agent started, for the worker of its job
// to take over instead of starting a run (Adopt).
type Adoptable struct {
	Run Run
	// Logr is the read end of the run's log pipe (the Spawner kept it).
	Logr *os.File
}

// Pending is a job that waits to restart (BackingOff: its run has exited,
// its restart policy starts it again after a backoff) as one agent hands
// it to the next, so that a crash-looping job keeps its restart count and
// backoff across an agent's restart instead of starting anew at once
// (docs/live-restart.md).
type Pending struct {
	// JobID is the job's ID.
	JobID string `json:"job_id"`
	// Fingerprint is the job's command (Fingerprint): a job whose command
	// changed starts anew.
	Fingerprint string `json:"fingerprint"`
	// Restarts is the worker's restart count (Status.Restarts) before the
	// restart it waits for.
	Restarts int `json:"restarts"`
	// Delay is the backoff delay in force: the next one grows from it.
	Delay time.Duration `json:"delay_ns"`
	// NextRestart is when the restart is due (Status.NextRestart).
	NextRestart time.Time `json:"-"`
	// LastExit is how the last run ended.
	LastExit *Exit `json:"last_exit,omitempty"`
}

// BackoffNotes records the jobs of this agent that wait to restart, for
// the next agent (which resumes them: Resume). Its methods are called
// from the workers' steps: they must not block.
type BackoffNotes interface {
	// Waiting records that p.JobID waits to restart.
	Waiting(p Pending)
	// Done records that jobID no longer waits (its run started, or the
	// worker ended).
	Done(jobID string)
}

// groupPath is g's path relative to the cgroup root ("" for a Group
// without one).
func groupPath(g Group) string {
	if p, ok := g.(interface{ Path() string }); ok {
		return p.Path()
	}
	return ""
}

// spawnVia starts run r of s through the Spawner sp (the lease guard,
// which stays the run's parent); the worker's step is held. The Spawner
// keeps a copy of the log pipe's read end logr for a later agent; logw is
// a write end of it, the run's stdout and stderr.
// The run's environment gets extra (runEnv) beyond the spec's, outside
// its fingerprint.
func (s *Spec) spawnVia(sp Spawner, r Run, extra []string, logw *os.File, logr int, onExit func(unix.WaitStatus)) (*proc, error) {
	x, err := Resolve(s)
	if err != nil {
		return nil, err
	}
	x.Env = append(x.Env, extra...)
	r.JobID, r.Cgroup = s.JobID, groupPath(s.Group)
	r.Fingerprint = Fingerprint(s, r.Cgroup)
	r, err = sp.Spawn(x, r, logw, logr, onExit)
	if err != nil {
		return nil, err
	}
	s.noteLeaf(r.Leaf)
	return &proc{pid: r.PID, runID: r.ID}, nil
}

// noteLeaf tells the job's cgroup which run leaf its processes live in
// (the Spawner made it): scrapes read that leaf alone.
func (s *Spec) noteLeaf(leaf string) {
	if g, ok := s.Group.(interface{ SetRunLeaf(string) }); ok && leaf != "" {
		g.SetRunLeaf(leaf)
	}
}

// forget tells the Spawner that run p's exit has been handled (its
// record and log pipe can go).
func (s *Spec) forget(p *proc) {
	if p.runID != "" && s.Spawner != nil {
		s.Spawner.Forget(Run{ID: p.runID})
	}
}

// noteWaiting tells Notes that the job waits to restart (state st, delay
// in force); noteDone that it no longer does.
func (s *Spec) noteWaiting(st Status, delay time.Duration) {
	if s.Notes != nil {
		s.Notes.Waiting(Pending{JobID: s.JobID, Fingerprint: Fingerprint(s, groupPath(s.Group)), Restarts: st.Restarts, Delay: delay,
			NextRestart: st.NextRestart, LastExit: st.LastExit})
	}
}

func (s *Spec) noteDone() {
	if s.Notes != nil {
		s.Notes.Done(s.JobID)
	}
}

// runEnv is what a run's environment gets beyond the spec's: its fencing
// token and the claim file (spec.EnvFencingToken, spec.EnvClaimFile),
// which are not part of the command's fingerprint (Fingerprint): the
// token is new for every run, and a run an earlier release started,
// without them, is still adopted.
func (s *Spec) runEnv(token uint64) []string {
	var env []string
	if token != 0 {
		env = append(env, spec.EnvFencingToken+"="+strconv.FormatUint(token, 10))
	}
	if s.ClaimFile != "" {
		env = append(env, spec.EnvClaimFile+"="+s.ClaimFile)
	}
	return append(env, s.RunEnv...)
}
