package supervisor

import (
	"context"
	"time"

	"github.com/berthd/berth/cgroup"
)

// storeFailed is called, on one of the embedded etcd's goroutines, when
// that store cannot go on and the process is about to exit (status 1).
// The claims of this agent's jobs live in that store: none of the jobs may
// run on unseen, so every worker is killed at once (fencing) and every
// cgroup of the agent removed before the exit. Under systemd the unit's
// Restart= starts the agent again, which then reports why the store does
// not start.
func (a *Agent) storeFailed(err error) {
	a.log.Error("the embedded etcd failed: killing every job before the agent exits", "error", err)
	if ferr := a.fenceAll(); ferr != nil {
		a.log.Error("kill jobs before exit: processes survived the kill", "error", ferr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cerr := a.hier.Cleanup(ctx, cgroup.JobsDir); cerr != nil {
		a.log.Error("remove job cgroups before exit", "error", cerr)
		return
	}
	if gerr := a.releaseGuard(ctx); gerr != nil {
		a.log.Error("release the lease guard before exit", "error", gerr)
	}
	if rerr := a.hier.Remove(ctx); rerr != nil {
		a.log.Error("remove the cgroup root before exit", "error", rerr)
	}
}
