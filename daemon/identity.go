package daemon

import (
	"fmt"
	"path/filepath"

	"github.com/berthd/berth/config"
)

// checkIdentity refuses a hand-over (berth upgrade, a restart of the
// service) when the agent's file, as it reads now, names another
// agent.data_dir or agent.cgroup_root than the ones in force: the next
// agent would look for the lease guard, the session and the restart waits
// in another data_dir, or for the runs in another cgroup root, while the
// guard of this one keeps every job and kills them all at its deadline
// (docs/cases.md C32; one agent per data_dir and cgroup_root). A file
// this release cannot read is left to the next program to judge (a newer
// release may know its keys). Errors: the changed key, both values and
// what to do.
func (a *Agent) checkIdentity() error {
	now := a.Config().Agent
	cfg, err := config.Load(a.path, a.host)
	if err != nil {
		a.log.Warn("before the hand-over: the file does not load with this release; the next program reads it", "config", a.path, "error", err)
		return nil
	}
	next := cfg.Agent
	if filepath.Clean(next.DataDir) != filepath.Clean(now.DataDir) {
		return fmt.Errorf("%s sets agent.data_dir %s, the agent runs with %s: the lease guard, the session and the jobs are this one's; "+
			"set it back to hand the jobs over, or stop the agent (every job stops) and start it with the new data_dir",
			a.path, next.DataDir, now.DataDir)
	}
	if filepath.Clean("/"+next.CgroupRoot) != filepath.Clean("/"+now.CgroupRoot) {
		return fmt.Errorf("%s sets agent.cgroup_root %q, the agent runs with %q: the jobs live in this one; "+
			"set it back to hand the jobs over, or stop the agent (every job stops) and start it with the new cgroup_root",
			a.path, next.CgroupRoot, now.CgroupRoot)
	}
	return nil
}
