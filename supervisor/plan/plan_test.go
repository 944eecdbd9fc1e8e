package plan

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
)

// job is a connector's own job running cmd with limits l.
func job(id string, l limits.Limits, cmd ...string) spec.Job {
	if len(cmd) == 0 {
		cmd = []string{"sleep", "1000"}
	}
	return spec.Job{ID: id, Connector: id, Kind: spec.KindConnector, Task: -1,
		Process: spec.Process{Command: cmd, Limits: l, Restart: spec.RestartOnFailure}}
}

func running(j spec.Job) Current {
	return Current{Spec: j, Phase: Running, Worker: worker.Status{State: worker.Running, PID: 10}}
}

// summary is a plan as IDs, for comparing.
type summary struct {
	Stop, Start, Update, Hold, Block, EnvFailed []string
	Reasons                                     []StopReason
	Restart, Done                               []string
}

func summarize(p Plan) summary {
	var s summary
	for _, x := range p.Stop {
		s.Stop, s.Reasons = append(s.Stop, x.ID), append(s.Reasons, x.Reason)
	}
	for _, j := range p.Start {
		s.Start = append(s.Start, j.ID)
	}
	for _, j := range p.Update {
		s.Update = append(s.Update, j.ID)
	}
	for _, h := range p.Hold {
		s.Hold = append(s.Hold, h.Job.ID)
	}
	for _, b := range p.Block {
		s.Block = append(s.Block, b.ID)
	}
	for _, f := range p.EnvFailed {
		s.EnvFailed = append(s.EnvFailed, f.Job.ID)
	}
	for id := range p.Restart {
		s.Restart = append(s.Restart, id)
	}
	for _, r := range p.Done {
		s.Done = append(s.Done, r.Job)
	}
	return s
}

func TestDecide(t *testing.T) {
	a := job("a", limits.Limits{Memory: 64 << 20})
	aMoreMemory := job("a", limits.Limits{Memory: 96 << 20})
	aNoMemory := job("a", limits.Limits{})
	aCpuset, aNoCpuset := job("a", limits.Limits{Memory: 64 << 20, Cpuset: "0"}), job("a", limits.Limits{Memory: 64 << 20})
	aNewCommand := job("a", limits.Limits{Memory: 64 << 20}, "sleep", "2000")
	aNeverRestart := a
	aNeverRestart.Process.Restart = spec.RestartNever
	b := job("b", limits.Limits{})
	paused := map[string]spec.Target{"a": {State: spec.TargetPaused, By: "ops"}}
	req := func(id string, rev int64, onlyFailed bool) map[string]spec.RestartRequest {
		return map[string]spec.RestartRequest{id: {Connector: id, Job: id, Rev: rev, OnlyFailed: onlyFailed}}
	}
	want := func(js ...spec.Job) map[string]spec.Job {
		m := map[string]spec.Job{}
		for _, j := range js {
			m[j.ID] = j
		}
		return m
	}
	cur := func(cs ...Current) map[string]Current {
		m := map[string]Current{}
		for _, c := range cs {
			m[c.Spec.ID] = c
		}
		return m
	}
	cannot := func(spec.Job) error { return errors.New("user berth-x does not exist") }

	for _, c := range []struct {
		name string
		in   Input
		want summary
	}{
		{"a new job starts", Input{Want: want(a)}, summary{Start: []string{"a"}}},
		{"an unchanged running job is only updated (a no-op)", Input{Want: want(a), Current: cur(running(a))},
			summary{Update: []string{"a"}}},
		{"a job no longer assigned stops", Input{Want: want(b), Current: cur(running(a), running(b))},
			summary{Stop: []string{"a"}, Reasons: []StopReason{StopRemoved}, Update: []string{"b"}}},
		{"a changed limit is written in place", Input{Want: want(aMoreMemory), Current: cur(running(a))},
			summary{Update: []string{"a"}}},
		{"a changed restart policy is applied in place", Input{Want: want(aNeverRestart), Current: cur(running(a))},
			summary{Update: []string{"a"}}},
		{"a removed limit is lifted in place", Input{Want: want(aNoMemory), Current: cur(running(a))},
			summary{Update: []string{"a"}}},
		{"a removed cpuset remakes the cgroup: stop, then start", Input{Want: want(aNoCpuset), Current: cur(running(aCpuset))},
			summary{Stop: []string{"a"}, Reasons: []StopReason{StopChanged}, Start: []string{"a"}}},
		{"a changed command restarts the job", Input{Want: want(aNewCommand), Current: cur(running(a))},
			summary{Stop: []string{"a"}, Reasons: []StopReason{StopChanged}, Start: []string{"a"}}},
		{"a new definition that cannot start keeps the old one running",
			Input{Want: want(aNewCommand), Current: cur(running(a)), CanStart: cannot},
			summary{Block: []string{"a"}}},
		{"a job whose worker failed to start is not stopped for a new one it cannot start either",
			Input{Want: want(aNewCommand), Current: cur(Current{Spec: a, Phase: Running, Worker: worker.Status{State: worker.Failed}}), CanStart: cannot},
			summary{Stop: []string{"a"}, Reasons: []StopReason{StopChanged}, Start: []string{"a"}}},
		{"a paused connector's running job is stopped and held", Input{Want: want(a), Current: cur(running(a)), Targets: paused},
			summary{Stop: []string{"a"}, Reasons: []StopReason{StopHeld}, Hold: []string{"a"}}},
		{"a held job stays held", Input{Want: want(a), Current: cur(Current{Spec: a, Phase: Held, Target: spec.TargetPaused}), Targets: paused},
			summary{Hold: []string{"a"}}},
		{"a resumed job starts", Input{Want: want(a), Current: cur(Current{Spec: a, Phase: Held, Target: spec.TargetPaused})},
			summary{Start: []string{"a"}}},
		{"a transient failure waits for its backoff", Input{Want: want(a), Current: cur(Current{Spec: a, Phase: Failed})},
			summary{}},
		{"a transient failure is retried when due", Input{Want: want(a), Current: cur(Current{Spec: a, Phase: Failed, RetryDue: true})},
			summary{Start: []string{"a"}}},
		{"a held claim is retried when due", Input{Want: want(a), Current: cur(Current{Spec: a, Phase: Waiting, RetryDue: true})},
			summary{Start: []string{"a"}}},
		{"a permanent failure is not retried on a timer", Input{Want: want(a), Current: cur(Current{Spec: a, Phase: Failed, Permanent: true, RetryDue: true})},
			summary{}},
		{"a permanent failure is retried on reload", Input{Want: want(a), Current: cur(Current{Spec: a, Phase: Failed, Permanent: true}), RetryFailed: true},
			summary{Start: []string{"a"}}},
		{"a permanent failure is retried with a new definition", Input{Want: want(aMoreMemory), Current: cur(Current{Spec: a, Phase: Failed, Permanent: true})},
			summary{Start: []string{"a"}}},
		{"a reload restarts a job whose worker failed to start",
			Input{Want: want(a), Current: cur(Current{Spec: a, Phase: Running, Worker: worker.Status{State: worker.Failed}}), RetryFailed: true},
			summary{Stop: []string{"a"}, Reasons: []StopReason{StopRetry}, Start: []string{"a"}}},
		{"an unreadable env_file fails the job", Input{Want: want(a), EnvErrs: map[string]error{"a": errors.New("no such file")}},
			summary{EnvFailed: []string{"a"}}},
		{"a restart request stops and starts a running job once", Input{Want: want(a), Current: cur(running(a)), Restarts: req("a", 7, false)},
			summary{Stop: []string{"a"}, Reasons: []StopReason{StopRequested}, Start: []string{"a"}, Restart: []string{"a"}}},
		{"a restart request carried out before is only removed", Input{Want: want(a), Current: cur(running(a)), Restarts: req("a", 7, false), Handled: map[string]int64{"a": 7}},
			summary{Update: []string{"a"}, Done: []string{"a"}}},
		{"only_failed leaves a running job alone", Input{Want: want(a), Current: cur(running(a)), Restarts: req("a", 7, true)},
			summary{Update: []string{"a"}, Done: []string{"a"}}},
		{"only_failed restarts a job that exited non-zero",
			Input{Want: want(a), Current: cur(Current{Spec: a, Phase: Running, Worker: worker.Status{State: worker.Exited, LastExit: &worker.Exit{Code: 3}}}), Restarts: req("a", 7, true)},
			summary{Stop: []string{"a"}, Reasons: []StopReason{StopRequested}, Start: []string{"a"}, Restart: []string{"a"}}},
		{"a held job's restart request is dropped", Input{Want: want(a), Current: cur(Current{Spec: a, Phase: Held, Target: spec.TargetPaused}), Targets: paused, Restarts: req("a", 7, false)},
			summary{Hold: []string{"a"}, Done: []string{"a"}}},
		{"a restart request of a job another agent runs is not this agent's", Input{Want: want(b), Restarts: req("a", 7, false)},
			summary{Start: []string{"b"}}},
		{"a requested restart waits for a definition that can start",
			Input{Want: want(aNewCommand), Current: cur(running(a)), Restarts: req("a", 7, false), CanStart: cannot},
			summary{Block: []string{"a"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := summarize(Decide(c.in)); !reflect.DeepEqual(got, c.want) {
				t.Errorf("plan\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// Stops and starts come in job ID order, whatever the maps' order, so a
// pass is the same on every run.
func TestDecideOrder(t *testing.T) {
	in := Input{Want: map[string]spec.Job{}, Current: map[string]Current{}}
	for _, id := range []string{"c", "a", "d", "b"} {
		in.Want[id] = job(id, limits.Limits{})
		in.Current["old-"+id] = running(job("old-"+id, limits.Limits{}))
	}
	for range 10 {
		s := summarize(Decide(in))
		if !reflect.DeepEqual(s.Start, []string{"a", "b", "c", "d"}) || !reflect.DeepEqual(s.Stop, []string{"old-a", "old-b", "old-c", "old-d"}) {
			t.Fatalf("order: starts %v, stops %v", s.Start, s.Stop)
		}
	}
}

// Decide forgets the restart revisions carried out once the request is gone
// from the store or replaced, and reports each job's target before the pass.
func TestDecideHandledAndBefore(t *testing.T) {
	a, b := job("a", limits.Limits{}), job("b", limits.Limits{})
	p := Decide(Input{Want: map[string]spec.Job{"a": a, "b": b},
		Current:  map[string]Current{"a": {Spec: a, Phase: Held, Target: spec.TargetStopped}},
		Restarts: map[string]spec.RestartRequest{"a": {Job: "a", Rev: 9}},
		Handled:  map[string]int64{"a": 8, "gone": 3}})
	if len(p.Handled) != 0 {
		t.Errorf("handled %v, want none (a's request was replaced, gone's removed)", p.Handled)
	}
	if p.Before["a"] != spec.TargetStopped || p.Before["b"] != "" {
		t.Errorf("before %v, want a stopped and b new", p.Before)
	}
}

// A phase moves in place only as transitions allow; names are as logs say.
func TestPhaseNames(t *testing.T) {
	for p, want := range map[Phase]string{Waiting: "waiting", Failed: "failed", Running: "running", Held: "held", Restarting: "restarting", 0: "phase(0)"} {
		if p.String() != want {
			t.Errorf("%d is %q, want %q", p, p.String(), want)
		}
	}
}

// inheritedSummary is what a plan does with inherited runs and waits, as
// IDs with the reasons of the discards.
type inheritedSummary struct {
	Start, Adopt, Resume []string
	Discard              []string // "<id> run|wait: <reason>"
	Groups               []string
}

func summarizeInherited(p Plan) inheritedSummary {
	var s inheritedSummary
	for _, j := range p.Start {
		s.Start = append(s.Start, j.ID)
	}
	for _, a := range p.Adopt {
		s.Adopt = append(s.Adopt, a.Job.ID+" "+a.Run.Run.ID)
	}
	for _, r := range p.Resume {
		s.Resume = append(s.Resume, r.Job.ID)
	}
	for _, d := range p.Discard {
		what := "wait"
		if d.Run != nil {
			what = "run " + d.Run.Run.ID
		}
		s.Discard = append(s.Discard, d.ID+" "+what+": "+d.Reason.String())
	}
	s.Groups = append(s.Groups, slices.Sorted(maps.Keys(p.InheritedGroups))...)
	return s
}

// The first pass decides every run and wait an earlier agent left: a
// job that starts adopts its run when the command is the same, resumes
// its wait on the same terms, and starts anew otherwise; a run or wait no
// job takes (deleted or not assigned here, a held connector, an env_file
// that cannot be read, a wait beside a run) is discarded with the reason.
func TestDecideInherited(t *testing.T) {
	a, b := job("a", limits.Limits{}), job("b", limits.Limits{})
	g := job("g1", limits.Limits{})
	g.Group = "pair"
	fp := func(j spec.Job) string { return "fp:" + strings.Join(j.Process.Command, " ") }
	run := func(id, fingerprint string) worker.Adoptable {
		return worker.Adoptable{Run: worker.Run{ID: "r-" + id, JobID: id, Fingerprint: fingerprint}}
	}
	same, other := fp(a), "fp:sleep 2000"
	want := func(js ...spec.Job) map[string]spec.Job {
		m := map[string]spec.Job{}
		for _, j := range js {
			m[j.ID] = j
		}
		return m
	}
	runs := func(rs ...worker.Adoptable) map[string]worker.Adoptable {
		m := map[string]worker.Adoptable{}
		for _, r := range rs {
			m[r.Run.JobID] = r
		}
		return m
	}
	waits := func(ps ...worker.Pending) map[string]worker.Pending {
		m := map[string]worker.Pending{}
		for _, p := range ps {
			m[p.JobID] = p
		}
		return m
	}
	for _, c := range []struct {
		name string
		in   Input
		want inheritedSummary
	}{
		{"nothing inherited: a plain start", Input{Want: want(a)}, inheritedSummary{Start: []string{"a"}}},
		{"a run of the same command is adopted", Input{Want: want(a), Inherited: Inherited{Runs: runs(run("a", same))}},
			inheritedSummary{Adopt: []string{"a r-a"}}},
		{"a run of another command is discarded and the job starts anew", Input{Want: want(a), Inherited: Inherited{Runs: runs(run("a", other))}},
			inheritedSummary{Start: []string{"a"}, Discard: []string{"a run r-a: the job's command changed"}}},
		{"a run of a job gone from the assignment is discarded", Input{Want: want(b), Inherited: Inherited{Runs: runs(run("a", same))}},
			inheritedSummary{Start: []string{"b"}, Discard: []string{"a run r-a: the job is not assigned here"}}},
		{"a run of a held connector's job is discarded",
			Input{Want: want(a), Targets: map[string]spec.Target{"a": {State: spec.TargetPaused}}, Inherited: Inherited{Runs: runs(run("a", same))}},
			inheritedSummary{Discard: []string{"a run r-a: the job's connector is held"}}},
		{"a run of a job whose env_file cannot be read is discarded",
			Input{Want: want(a), EnvErrs: map[string]error{"a": errors.New("no such file")}, Inherited: Inherited{Runs: runs(run("a", same))}},
			inheritedSummary{Discard: []string{"a run r-a: the job does not start"}}},
		{"a wait of the same command is resumed", Input{Want: want(a), Inherited: Inherited{Waits: waits(worker.Pending{JobID: "a", Fingerprint: same, Restarts: 3})}},
			inheritedSummary{Resume: []string{"a"}}},
		{"a wait of another command is discarded and the job starts anew",
			Input{Want: want(a), Inherited: Inherited{Waits: waits(worker.Pending{JobID: "a", Fingerprint: other})}},
			inheritedSummary{Start: []string{"a"}, Discard: []string{"a wait: the job's command changed"}}},
		{"a wait of a job gone is discarded", Input{Inherited: Inherited{Waits: waits(worker.Pending{JobID: "a", Fingerprint: same})}},
			inheritedSummary{Discard: []string{"a wait: the job is not assigned here"}}},
		{"a run wins over a wait: adopted, the wait discarded",
			Input{Want: want(a), Inherited: Inherited{Runs: runs(run("a", same)), Waits: waits(worker.Pending{JobID: "a", Fingerprint: same})}},
			inheritedSummary{Adopt: []string{"a r-a"}, Discard: []string{"a wait: the job has a run"}}},
		{"a run of another command beside a wait: both discarded, the job starts anew",
			Input{Want: want(a), Inherited: Inherited{Runs: runs(run("a", other)), Waits: waits(worker.Pending{JobID: "a", Fingerprint: same})}},
			inheritedSummary{Start: []string{"a"}, Discard: []string{"a run r-a: the job's command changed", "a wait: the job has a run"}}},
		{"a run and a wait of a job gone: both discarded",
			Input{Inherited: Inherited{Runs: runs(run("a", same)), Waits: waits(worker.Pending{JobID: "a", Fingerprint: same})}},
			inheritedSummary{Discard: []string{"a run r-a: the job is not assigned here", "a wait: the job has a run"}}},
		{"a job with a worker already takes nothing",
			Input{Want: want(a), Current: map[string]Current{"a": running(a)}, Inherited: Inherited{Runs: runs(run("a", same))}},
			inheritedSummary{Discard: []string{"a run r-a: the job does not start"}}},
		{"a sharing group with an inherited run of a wanted job is inherited, whatever the run's command",
			Input{Want: want(g, b), Inherited: Inherited{Runs: runs(run("g1", "fp:changed"), run("b", fp(b)))}},
			inheritedSummary{Start: []string{"g1"}, Adopt: []string{"b r-b"}, Discard: []string{"g1 run r-g1: the job's command changed"}, Groups: []string{"pair"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.in.Fingerprint = fp
			p := Decide(c.in)
			if got := summarizeInherited(p); !reflect.DeepEqual(got, c.want) {
				t.Errorf("plan\n got %+v\nwant %+v", got, c.want)
			}
			// Every inherited run and wait is decided once.
			n := len(c.in.Inherited.Runs) + len(c.in.Inherited.Waits)
			if got := len(p.Adopt) + len(p.Resume) + len(p.Discard); got != n {
				t.Errorf("%d inherited, %d decided", n, got)
			}
		})
	}
}
