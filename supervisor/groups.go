package supervisor

import (
	"context"
	"reflect"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// reconcileGroups makes or updates in place the parent cgroup of every
// sharing group that has a job in want, with the group's limits.
func (e *executor) reconcileGroups(wl *spec.Workload, want map[string]spec.Job) {
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
			write := res
			if e.adopting(g.Name, want) {
				// The group's cgroup holds an adopted run and the limits
				// the earlier agent wrote: see startJob.
				write = e.adoptedLimits(cgroup.GroupRel(g.Name), res)
			}
			cg, err := e.hier.New(cgroup.GroupRel(g.Name), write)
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
		// A removed limit is written as the kernel's default (limits.Lift).
		if err := cur.group.Update(limits.Lift(cur.res, res)); err != nil {
			e.log.Error("update group cgroup", "group", g.Name, "error", err)
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

// adopting reports whether a job of sharing group name in want has a run
// of an earlier agent offered for adoption: the group's cgroup is then the
// earlier agent's.
func (e *executor) adopting(name string, want map[string]spec.Job) bool {
	for id, j := range want {
		if j.Group == name && e.rt.Offered(id) {
			return true
		}
	}
	return false
}

// adoptedLimits is what is written to the cgroup at rel that an earlier
// agent made, whose limits this one did not write: res with the kernel's
// default for every limit res does not set (limits.Defaults), and every
// io throttle the cgroup holds on a device (and rate) res does not set
// lifted (read from the kernel: cgroup.Group.Throttles).
func (e *executor) adoptedLimits(rel string, res *specs.LinuxResources) *specs.LinuxResources {
	write := limits.Defaults(res)
	g, err := e.hier.Load(rel)
	if err != nil {
		return write // not made yet: nothing to lift
	}
	io, err := g.Throttles()
	if err != nil {
		e.log.Warn("read the io limits of an adopted cgroup; those removed from the definition stay in force", "cgroup", rel, "error", err)
		return write
	}
	if io != nil {
		write = limits.Lift(&specs.LinuxResources{BlockIO: io}, write)
	}
	return write
}
