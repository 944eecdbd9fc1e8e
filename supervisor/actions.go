package supervisor

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/berthd/berth/source"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/supervisor/plan"
)

// Operator actions as the agent carries them out for the jobs it runs:
// a connector's target state (paused or stopped: the job's worker stopped,
// its cgroup removed, its claim released, the job shown PAUSED or STOPPED;
// running again on resume) and restart requests (the job stopped and
// started again in the usual order: stop, remove cgroup, release claim,
// then claim, cgroup, start — once, by the agent that runs it). Decide
// (package plan) chooses; this file records the holds and the outcome.

// hold records job j as Held by its connector's target t: no worker, no
// cgroup, no claim (the pass stopped whatever ran before).
func (e *executor) hold(j spec.Job, t spec.Target) {
	e.tbl.mu.Lock()
	defer e.tbl.mu.Unlock()
	if cur := e.tbl.jobs[j.ID]; cur != nil && cur.phase == plan.Held {
		cur.move(plan.Held)
		cur.spec, cur.target, cur.heldBy, cur.heldAt = j, t.State, t.By, t.At
		return
	}
	e.tbl.jobs[j.ID] = &job{spec: j, phase: plan.Held, target: t.State, heldBy: t.By, heldAt: t.At}
	e.tbl.retries.Forget(j.ID)
}

// finishActions logs what the pass changed, one line per connector and
// target state with who asked, one per restart request decided or carried
// out, and removes the handled requests from the store.
func (e *executor) finishActions(ctx context.Context, d source.Desired, want map[string]spec.Job, p plan.Plan) {
	for _, n := range p.Notes {
		r := n.Request
		e.log.Info(n.Msg, "job_id", r.Job, "by", r.By, "requested_at", r.At.Format(time.RFC3339), "only_failed", r.OnlyFailed, "connector", r.Connector)
	}
	type change struct {
		connector string
		state     spec.TargetState
	}
	changed := map[change][]string{}
	for id, j := range want {
		now := spec.TargetRunning
		if t, ok := p.Held[id]; ok {
			now = t.State
		}
		was := p.Before[id]
		if now == was || (now == spec.TargetRunning && (was == "" || was == spec.TargetRunning)) {
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
		t := plan.TargetOf(d.Targets, k.connector)
		msg := "connector " + string(k.state) + ": its jobs here stopped, their cgroups removed"
		if k.state == spec.TargetRunning {
			msg = "connector resumed: its jobs here start"
		}
		e.log.Info(msg, "connector", k.connector, "jobs", strings.Join(jobs, ","), "by", t.By, "requested_at", t.At.Format(time.RFC3339))
	}

	done := append([]spec.RestartRequest(nil), p.Done...)
	for _, id := range slices.Sorted(maps.Keys(p.Restart)) {
		r := p.Restart[id]
		st, reason := "", ""
		if j := e.tbl.get(id); j != nil {
			e.tbl.mu.RLock()
			s, why := j.status()
			e.tbl.mu.RUnlock()
			st, reason = string(s.State), why
		}
		e.log.Info("job restarted on request", "job_id", id, "by", r.By, "requested_at", r.At.Format(time.RFC3339),
			"only_failed", r.OnlyFailed, "state", st, "reason", reason)
		done = append(done, r)
	}
	e.tbl.mu.Lock()
	e.tbl.handled = p.Handled
	for _, r := range done {
		e.tbl.handled[r.Job] = r.Rev
	}
	e.tbl.mu.Unlock()
	for _, r := range done {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := e.source.RestartDone(rctx, r)
		cancel()
		if err != nil {
			// Kept in handled: the next pass removes it again, never restarts twice.
			e.log.Warn("remove a handled restart request from the store; trying again on the next pass", "job_id", r.Job, "error", err)
		}
	}
}
