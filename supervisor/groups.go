package supervisor

import (
	"context"
	"reflect"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/supervisor/apply"
)

// reconcileGroups makes or updates in place the parent cgroup of every
// sharing group that has a job in want, with the group's limits; the
// cgroup of a group in inherited is an earlier agent's (plan.Plan's
// InheritedGroups).
func (e *executor) reconcileGroups(wl *spec.Workload, want map[string]spec.Job, inherited map[string]bool) {
	used := map[string]bool{}
	for _, j := range want {
		if j.Group != "" {
			used[j.Group] = true
		}
	}
	if wl == nil {
		return
	}
	for _, g := range wl.Groups {
		if !used[g.Name] {
			continue
		}
		res, notes, err := g.Limits.Resources(nil)
		for _, n := range notes {
			e.log.Info("group limits", "group", g.Name, "note", n)
		}
		if err != nil {
			e.log.Error("group limits", "group", g.Name, "error", err)
			continue
		}
		e.tbl.mu.RLock()
		cur := e.tbl.groups[g.Name]
		e.tbl.mu.RUnlock()
		if cur == nil {
			// The group of an adopted run is the earlier agent's.
			cg, err := apply.New(e.hier, e.log, cgroup.GroupRel(g.Name), res, inherited[g.Name])
			if err != nil {
				e.log.Error("create group cgroup", "group", g.Name, "error", err)
				continue
			}
			e.tbl.mu.Lock()
			e.tbl.groups[g.Name] = &groupNode{name: g.Name, res: res, limits: g.Limits, group: cg}
			e.tbl.mu.Unlock()
			continue
		}
		if limits.CpusetRemoved(cur.limits, g.Limits) {
			e.log.Warn("the cpuset was removed from a sharing group: it stays in force until the group's jobs are all stopped and its cgroup is made anew", "group", g.Name)
		}
		e.tbl.mu.Lock()
		old := cur.limits
		cur.limits = g.Limits
		e.tbl.mu.Unlock()
		if reflect.DeepEqual(cur.res, res) {
			continue
		}
		if refused := apply.Update(cur.group, cur.res, res); refused != nil {
			e.log.Error("update group cgroup", "group", g.Name, "refused", refused)
			continue
		}
		cur.res = res
		e.log.Info("group limits updated in place", "group", g.Name,
			"changes", changeList(config.DiffJobs(spec.Job{Process: spec.Process{Limits: old}}, spec.Job{Process: spec.Process{Limits: g.Limits}})))
	}
}

// removeUnusedGroups removes the cgroup of every sharing group with no job
// in want.
func (e *executor) removeUnusedGroups(want map[string]spec.Job) {
	used := map[string]bool{}
	for _, j := range want {
		used[j.Group] = true
	}
	e.tbl.mu.RLock()
	var drop []*groupNode
	for name, g := range e.tbl.groups {
		if !used[name] {
			drop = append(drop, g)
		}
	}
	e.tbl.mu.RUnlock()
	for _, g := range drop {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := g.group.Delete(ctx)
		cancel()
		if err != nil {
			e.log.Error("remove group cgroup", "group", g.name, "error", err)
			continue
		}
		e.tbl.mu.Lock()
		delete(e.tbl.groups, g.name)
		e.tbl.mu.Unlock()
	}
}
