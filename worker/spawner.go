package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Spawner starts jobs' processes in another process that stays their
// parent while agents come and go: the lease guard (package guard). With
// one set (Runtime.UseSpawner) the agent's workers start every run
// through it, and a restarted agent can take over the runs an earlier one
// started (Runtime.Offer, live restart: docs/live-restart.md).
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
	// started (taken from Runtime.Offer): at once if it has already
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
	// (proc(5), /proc/PID/stat field 22).
	StartTicks uint64 `json:"start_ticks"`
	// StartedAt is when the run began (Status.StartedAt).
	StartedAt time.Time `json:"started_at"`
	// Restarts is the worker's restart count when the run began
	// (Status.Restarts).
	Restarts int `json:"restarts"`
}

// Fingerprint hashes what a run of spec executes (command, environment,
// working directory, user, cgroup): two specs with the same fingerprint
// start the same process, so a run of one may be adopted for the other.
// Limits and stop settings are not part of it: they change in place.
func Fingerprint(spec *Spec) string {
	var cg string
	if g, ok := spec.Group.(interface{ Path() string }); ok {
		cg = g.Path()
	}
	b, _ := json.Marshal([]any{spec.JobID, spec.Path, spec.Args, spec.Env, spec.Dir, spec.User, cg})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Adoptable is a run an earlier agent started, offered to this one's
// workers (Runtime.Offer): the worker of its job takes it over instead of
// starting a run.
type Adoptable struct {
	Run Run
	// Logr is the read end of the run's log pipe (the Spawner kept it).
	Logr *os.File
}

// UseSpawner has every later start go through s (nil: the Runtime's own
// launcher threads).
func (rt *Runtime) UseSpawner(s Spawner) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.spawner = s
}

// Offer hands rt the runs an earlier agent started, for the workers of
// their jobs to adopt (the first worker of the job takes it).
func (rt *Runtime) Offer(runs []Adoptable) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.offered == nil {
		rt.offered = map[string]Adoptable{}
	}
	for _, a := range runs {
		rt.offered[a.Run.JobID] = a
	}
}

// Unadopted removes and returns the offered runs no worker took: the
// caller kills their cgroups (no claim covers them).
func (rt *Runtime) Unadopted() []Adoptable {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []Adoptable
	for _, a := range rt.offered {
		out = append(out, a)
	}
	rt.offered = nil
	return out
}

// Offered reports whether a run of an earlier agent is offered for jobID
// and not yet taken (false on a nil Runtime): the job's cgroup is then the
// run's, made by the earlier agent, with limits this agent did not write.
func (rt *Runtime) Offered(jobID string) bool {
	if rt == nil {
		return false
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	_, ok := rt.offered[jobID]
	return ok
}

// take removes and returns the run offered for jobID, if any.
func (rt *Runtime) take(jobID string) (Adoptable, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	a, ok := rt.offered[jobID]
	if ok {
		delete(rt.offered, jobID)
	}
	return a, ok
}

// spawnerOf returns the Spawner in use (nil: none).
func (rt *Runtime) spawnerOf() Spawner {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.spawner
}

// Adopted is how many offered runs workers of rt have taken (Start) to
// take over: those of the same command (a run whose watch cannot be set
// up is killed and started anew by its worker, and still counts).
func (rt *Runtime) Adopted() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.adopted
}

// noteAdopted counts one run taken over.
func (rt *Runtime) noteAdopted() {
	rt.mu.Lock()
	rt.adopted++
	rt.mu.Unlock()
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
// the next agent (Runtime.OfferPending). Its methods are called from the
// workers' steps: they must not block.
type BackoffNotes interface {
	// Waiting records that p.JobID waits to restart.
	Waiting(p Pending)
	// Done records that jobID no longer waits (its run started, or the
	// worker ended).
	Done(jobID string)
}

// UseBackoffNotes has every worker that enters or leaves a backoff tell n
// (nil: none).
func (rt *Runtime) UseBackoffNotes(n BackoffNotes) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.notes = n
}

// notesOf returns the BackoffNotes in use (nil: none).
func (rt *Runtime) notesOf() BackoffNotes {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.notes
}

// OfferPending hands rt the jobs an earlier agent had waiting to restart:
// the worker of such a job that has no run to adopt waits out the rest of
// the backoff with the restart count carried over, if its command is the
// same.
func (rt *Runtime) OfferPending(ps []Pending) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.waits == nil {
		rt.waits = map[string]Pending{}
	}
	for _, p := range ps {
		rt.waits[p.JobID] = p
	}
}

// UntakenPending removes and returns the IDs of the offered restart waits
// no worker took (the job is gone, or has a run): the caller drops their
// notes.
func (rt *Runtime) UntakenPending() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []string
	for id := range rt.waits {
		out = append(out, id)
	}
	rt.waits = nil
	return out
}

// takePending removes and returns the restart wait offered for jobID.
func (rt *Runtime) takePending(jobID string) (Pending, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	p, ok := rt.waits[jobID]
	if ok {
		delete(rt.waits, jobID)
	}
	return p, ok
}
