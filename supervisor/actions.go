package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/source"
)

// Operator actions as the agent carries them out for the jobs it runs:
// a connector's target state (paused or stopped: the job's worker stopped,
// its cgroup removed, its claim released, the job shown PAUSED or STOPPED;
// running again on resume) and restart requests (the job stopped and
// started again in the usual order: stop, remove cgroup, release claim,
// then claim, cgroup, start — once, by the agent that runs it).

// actionPlan is what one reconcile pass does about operator actions.
type actionPlan struct {
	// held maps a wanted job whose connector is paused or stopped to its
	// target.
	held map[string]cluster.Target
	// restart maps a running job to the request that restarts it now.
	restart map[string]cluster.RestartRequest
	// done are the requests handled in this pass (carried out, found
	// satisfied, or not applicable), to remove from the store.
	done []cluster.RestartRequest
	// before is each wanted job's target state on this agent before the
	// pass ("" when the agent had no entry for it), to log what changed.
	before map[string]config.TargetState
}

// targetOf is connector's target in desired; running when none is set.
func targetOf(d source.Desired, connector string) cluster.Target {
	t, ok := d.Targets[connector]
	if !ok || t.State == "" {
		t.State = config.TargetRunning
	}
	return t
}

// planActions decides, for the jobs this agent must run (want), which are
// held by their connector's target state and which restart requests to
// carry out now. A request for a job that is held, that is not FAILED when
// it asked for onlyFailed, or that is about to start anyway (the start is
// the restart) is handled without a restart. A request this agent has
// carried out already (its removal from the store failed) is only removed
// again. Requests for jobs that other agents run are theirs.
func (a *Agent) planActions(d source.Desired, want map[string]config.Job) actionPlan {
	p := actionPlan{held: map[string]cluster.Target{}, restart: map[string]cluster.RestartRequest{}, before: map[string]config.TargetState{}}
	a.mu.Lock()
	for id, rev := range a.handled {
		if r, ok := d.Restarts[id]; !ok || r.Rev != rev {
			delete(a.handled, id) // gone from the store, or a new request
		}
	}
	a.mu.Unlock()
	for id, j := range want {
		if t := targetOf(d, j.Connector); t.State != config.TargetRunning {
			p.held[id] = t
		}
		a.mu.RLock()
		cur := a.jobs[id]
		a.mu.RUnlock()
		switch {
		case cur == nil:
			p.before[id] = ""
		case cur.held != "":
			p.before[id] = cur.held
		default:
			p.before[id] = config.TargetRunning
		}
	}
	ids := make([]string, 0, len(d.Restarts))
	for id := range d.Restarts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := d.Restarts[id]
		if _, ok := want[id]; !ok {
			continue
		}
		a.mu.RLock()
		cur, rev := a.jobs[id], a.handled[id]
		a.mu.RUnlock()
		if rev == r.Rev {
			p.done = append(p.done, r)
			continue
		}
		log := a.log.With("job_id", id, "by", r.By, "requested_at", r.At.Format(time.RFC3339), "only_failed", r.OnlyFailed)
		switch t, held := p.held[id]; {
		case held:
			log.Info("restart request not carried out: the connector is "+string(t.State), "connector", r.Connector)
		case cur == nil || cur.held != "":
			log.Info("restart request: the job starts now")
		case r.OnlyFailed && api.ConnectState(a.jobInfo(cur)) != api.StateFailed:
			log.Info("restart request not carried out: only failed jobs were to restart, and the job is " + api.ConnectState(a.jobInfo(cur)))
		default:
			p.restart[id] = r
			continue
		}
		p.done = append(p.done, r)
	}
	return p
}

// hold records job j as held by its connector's target t: no worker, no
// cgroup, no claim (reconcile stopped whatever ran before).
func (a *Agent) hold(j config.Job, t cluster.Target) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur := a.jobs[j.ID]; cur != nil && cur.held == t.State {
		cur.spec, cur.heldBy, cur.heldAt = j, t.By, t.At
		return
	}
	a.jobs[j.ID] = &job{spec: j, held: t.State, heldBy: t.By, heldAt: t.At}
	delete(a.retries, j.ID)
}

// finishActions logs what the pass changed, one line per connector and
// target state with who asked, one per restart carried out, and removes
// the handled requests from the store.
func (a *Agent) finishActions(ctx context.Context, d source.Desired, want map[string]config.Job, p actionPlan) {
	type change struct {
		connector string
		state     config.TargetState
	}
	changed := map[change][]string{}
	for id, j := range want {
		now := config.TargetRunning
		if t, ok := p.held[id]; ok {
			now = t.State
		}
		was := p.before[id]
		if now == was || (now == config.TargetRunning && (was == "" || was == config.TargetRunning)) {
			continue
		}
		k := change{j.Connector, now}
		changed[k] = append(changed[k], id)
	}
	keys := make([]change, 0, len(changed))
	for k := range changed {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, k int) bool {
		return keys[i].connector < keys[k].connector || keys[i].connector == keys[k].connector && keys[i].state < keys[k].state
	})
	for _, k := range keys {
		jobs := changed[k]
		sort.Strings(jobs)
		t := targetOf(d, k.connector)
		msg := "connector " + string(k.state) + ": its jobs here stopped, their cgroups removed"
		if k.state == config.TargetRunning {
			msg = "connector resumed: its jobs here start"
		}
		a.log.Info(msg, "connector", k.connector, "jobs", strings.Join(jobs, ","), "by", t.By, "requested_at", t.At.Format(time.RFC3339))
	}

	ids := make([]string, 0, len(p.restart))
	for id := range p.restart {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := p.restart[id]
		st, reason := "", ""
		a.mu.RLock()
		if j := a.jobs[id]; j != nil {
			s, why := j.state()
			st, reason = string(s.State), why
		}
		a.mu.RUnlock()
		a.log.Info("job restarted on request", "job_id", id, "by", r.By, "requested_at", r.At.Format(time.RFC3339),
			"only_failed", r.OnlyFailed, "state", st, "reason", reason)
		p.done = append(p.done, r)
	}
	for _, r := range p.done {
		a.mu.Lock()
		a.handled[r.Job] = r.Rev
		a.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := a.source.RestartDone(rctx, r)
		cancel()
		if err != nil {
			// Kept in handled: the next pass removes it again, never restarts twice.
			a.log.Warn("remove a handled restart request from the store; trying again on the next pass", "job_id", r.Job, "error", err)
		}
	}
}

// Target implements api.Backend: the target as the agent's source last
// read it from the store (what the agent is carrying out, or about to).
func (a *Agent) Target(connector string) config.TargetState {
	return targetOf(a.source.Desired(), connector).State
}

// SetTarget implements api.Backend: the target is stored in the cluster,
// and every agent, this one included, holds it when it reads it back.
func (a *Agent) SetTarget(ctx context.Context, connector string, state config.TargetState, by string) error {
	err := a.source.SetTarget(ctx, connector, cluster.Target{State: state, By: by, At: a.clock.Now().UTC()})
	return storeErr(err)
}

// RequestRestarts implements api.Backend.
func (a *Agent) RequestRestarts(ctx context.Context, connector string, jobs []string, onlyFailed bool, by string) error {
	return storeErr(a.source.RequestRestarts(ctx, connector, jobs, onlyFailed, by))
}

// storeErr turns cluster.ErrNotFound into api.ErrNotFound.
func storeErr(err error) error {
	if errors.Is(err, cluster.ErrNotFound) {
		return fmt.Errorf("%w: %w", api.ErrNotFound, err)
	}
	return err
}
