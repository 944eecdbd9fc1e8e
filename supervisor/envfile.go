package supervisor

import (
	"fmt"
	"maps"

	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/supervisor/plan"
)

// resolveEnvFiles adds to every job of want that names an env_file the
// file's values (they override the process's env, as systemd's
// EnvironmentFile= overrides Environment=), so that comparing definitions
// sees a changed file. It returns, by job ID, why a job's file could not
// be read: such a job is not started, and a running one keeps its previous
// definition (Host.CheckJob checks the env_file too).
func (e *executor) resolveEnvFiles(want map[string]spec.Job) map[string]error {
	var errs map[string]error
	for id, j := range want {
		if j.Process.EnvFile == "" {
			continue
		}
		vals, err := e.envFiles.Get(j.Process.EnvFile, e.log)
		if err != nil {
			if errs == nil {
				errs = map[string]error{}
			}
			errs[id] = err
			continue
		}
		env := make(map[string]string, len(j.Process.Env)+len(vals))
		maps.Copy(env, j.Process.Env)
		maps.Copy(env, vals)
		j.Process.Env = env
		want[id] = j
	}
	return errs
}

// envFailed records job j as failed to start because its env_file cannot
// be read: no claim is taken, no cgroup made; it is tried again on reload
// or when its definition changes. A claim cur held is kept with the job
// (released when the job stops).
func (e *executor) envFailed(cur *job, j spec.Job, err error) {
	nj := &job{spec: j, phase: plan.Failed, err: fmt.Sprintf("start: %v", err), permanent: true}
	if cur != nil {
		nj.claimed = cur.claimed
	}
	e.tbl.mu.Lock()
	e.tbl.jobs[j.ID] = nj
	e.tbl.retries.Forget(j.ID)
	e.tbl.mu.Unlock()
	if cur == nil || cur.err != nj.err {
		e.log.Error("job failed to start; it is retried on reload or when its definition changes", "job_id", j.ID, "error", err)
	}
}
