package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/guard"
	"github.com/berthd/berth/scope"
)

// jobsPlace is where the jobs of an agent run by systemd live.
type jobsPlace struct {
	// root is the cgroup root of the jobs: the jobs' scope's cgroup, or ""
	// for the service's own (cgroup_root = "").
	root string
	// service is the agent's service; scope its jobs' scope unit ("" when
	// the jobs live in the service's cgroup); created is true when this
	// agent made the scope around itself and must Return once the guard
	// holds it.
	service scope.Service
	scope   string
	created bool
}

// scopeTimeout bounds the D-Bus calls that find or make the jobs' scope.
const scopeTimeout = 15 * time.Second

// placeJobs decides where the jobs of an agent with cgroup_root = "" live.
// Run by systemd as a service on a unified host, with a lease guard: in
// the service's jobs' scope (package scope), so that neither a crash of
// the agent (systemd's KillMode=control-group kill of the service's
// cgroup) nor a restart of the service reaches them. Elsewhere, and when
// the scope cannot be had (logged), in the service's own cgroup as before:
// a crash of the agent then ends the jobs with the service.
//
// A guard of an earlier agent that runs in the service's own cgroup (an
// agent from before the scope, handing over to this one) keeps the jobs
// where they are until the service is next stopped.
//
// Errors: the scope was made around this process and it could not move
// back (it must not run jobs from there).
func (a *Agent) placeJobs(ctx context.Context) (jobsPlace, error) {
	if len(a.guardCmd) == 0 || cgroup.DetectMode() != cgroup.Unified {
		return jobsPlace{}, nil
	}
	svc, ok, err := scope.OwnService()
	if err != nil || !ok {
		return jobsPlace{}, nil
	}
	p := jobsPlace{service: svc}
	if hasProcs(filepath.Join("/sys/fs/cgroup", svc.Cgroup, guard.CgroupLeaf)) {
		a.log.Info("the lease guard of an earlier agent runs in the service's cgroup: the jobs stay there until the service is stopped",
			"service", svc.Unit, "cgroup", svc.Cgroup)
		return p, nil
	}
	sctx, cancel := context.WithTimeout(ctx, scopeTimeout)
	defer cancel()
	j, err := scope.Ensure(sctx, svc)
	if err != nil {
		if own, _, oerr := scope.OwnService(); oerr != nil || own.Cgroup != svc.Cgroup {
			return jobsPlace{}, fmt.Errorf("jobs' scope of %s: %w", svc.Unit, err)
		}
		a.log.Warn("the jobs stay in the service's cgroup: a crash of the agent will end them with the service",
			"service", svc.Unit, "error", err)
		return p, nil
	}
	p.root, p.scope, p.created = j.Cgroup, j.Unit, j.Created
	a.log.Info("jobs run in a scope unit of their own, apart from the service", "service", svc.Unit, "scope", j.Unit, "cgroup", j.Cgroup, "created", j.Created)
	return p, nil
}

// leaveScope moves the agent out of the jobs' scope it made around itself
// back into its service, once the guard holds the scope, and removes the
// scope's agent leaf it passed through.
func (a *Agent) leaveScope(p jobsPlace) error {
	if !p.created {
		return nil
	}
	if err := scope.Return(p.service); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join("/sys/fs/cgroup", p.root, cgroup.AgentDir)); err != nil && !os.IsNotExist(err) {
		a.log.Warn("remove the jobs' scope's agent leaf", "error", err)
	}
	return nil
}

// hasProcs reports whether the cgroup2 directory dir holds a process.
func hasProcs(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	return err == nil && strings.TrimSpace(string(b)) != ""
}

// Service returns the systemd service the agent runs as ("" when none) and
// the scope unit its jobs live in ("" when they live in the service's own
// cgroup, or the agent is no service). Set once Run has placed the jobs.
func (a *Agent) Service() (unit, jobsScope string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.place.service.Unit, a.place.scope
}

// scopeCheck is how often watchScope looks at the jobs' scope.
const scopeCheck = 2 * time.Second

// watchScope reports, once, when the jobs' scope p of this agent has gone
// (its cgroup removed, or the unit no longer active) while ctx lives; a
// nil channel when the jobs live in no scope.
// The watch ends with ctx; wait returns once it has.
func (a *Agent) watchScope(ctx context.Context, p jobsPlace) (lost <-chan error, wait func()) {
	if p.scope == "" {
		return nil, func() {}
	}
	out := make(chan error, 1)
	done := make(chan struct{})
	dir := filepath.Join("/sys/fs/cgroup", p.root)
	go func() {
		defer close(done)
		t := time.NewTicker(scopeCheck)
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var err error
			if _, serr := os.Stat(filepath.Join(dir, "cgroup.procs")); serr != nil {
				err = fmt.Errorf("cgroup %s: %w", p.root, serr)
			} else if n%5 == 4 {
				qctx, cancel := context.WithTimeout(ctx, scopeTimeout)
				active, aerr := scope.Active(qctx, p.scope)
				cancel()
				if aerr == nil && !active {
					err = fmt.Errorf("the unit %s is no longer active", p.scope)
				}
			}
			if err != nil && ctx.Err() == nil {
				out <- err
				return
			}
		}
	}()
	return out, func() { <-done }
}
