package supervisor

import (
	"context"
	"fmt"

	"github.com/berthd/berth/guard"
)

// startGuard connects to the lease guard of this agent's data_dir and
// cgroup root, starting one when none runs (Options.GuardCommand; none at
// all when it is unset). From the session's first deadline on, the guard
// kills every job if that deadline passes without a renewal: this agent
// was killed or hangs (docs/live-restart.md). It must run after the
// leftovers of an earlier run are gone and before the source starts.
func (a *Agent) startGuard(ctx context.Context) error {
	if len(a.guardCmd) == 0 {
		return nil
	}
	cfg := a.Config()
	g, err := guard.Start(ctx, guard.Options{DataDir: cfg.Agent.DataDir, CgroupRoot: cfg.Agent.CgroupRoot,
		Command: a.guardCmd, Log: a.log})
	if err != nil {
		return fmt.Errorf("start the lease guard: %w", err)
	}
	a.guard = g
	return nil
}

// releaseGuard lets the guard exit without killing: call it only once
// every job's processes are gone and before the cgroup root is removed
// (the guard's own leaf is under it).
func (a *Agent) releaseGuard(ctx context.Context) error {
	return a.guard.Release(ctx)
}
