package supervisor

import (
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/supervisor/plan"
)

// envFiles holds the values of the env_files this agent's jobs name, read
// on this host: a file is read when a job first needs it, and read again
// at every reload (SIGHUP), so that a changed file restarts the jobs that
// use it, as a changed env in the agent file does. Between reloads a job
// (re)starts with the values read last. A file that cannot be read at a
// reload keeps the values read before, with an error in the log: a running
// job is never harmed by a file broken meanwhile. The definition in the
// store holds only the path.
type envFiles struct {
	mu    sync.Mutex
	files map[string]map[string]string // path -> values read since the last reload
	prev  map[string]map[string]string // before the last reload: fallback values
}

// reload forgets what was read: every file is read again when next needed.
func (e *envFiles) reload() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.prev, e.files = e.files, nil
}

// get returns the values of the env_file at path (config.ReadEnvFile).
// Values read are kept until the next reload; a file that cannot be read
// is tried again at the next call (the job waits for it), unless values
// read before the last reload stand in for it.
func (e *envFiles) get(path string, log *slog.Logger) (map[string]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if env, ok := e.files[path]; ok {
		return env, nil
	}
	env, err := config.ReadEnvFile(path)
	if err != nil {
		p, ok := e.prev[path]
		if !ok {
			return nil, err
		}
		log.Error("env_file cannot be read again; its jobs keep the values read before", "env_file", path, "error", err)
		env = p
	}
	if e.files == nil {
		e.files = map[string]map[string]string{}
	}
	e.files[path] = env
	return env, nil
}

// resolveEnvFiles adds to every job of want that names an env_file the
// file's values (they override the process's env, as systemd's
// EnvironmentFile= overrides Environment=), so that comparing definitions
// sees a changed file. It returns, by job ID, why a job's file could not
// be read: such a job is not started, and a running one keeps its previous
// definition (Host.CheckJob checks the env_file too).
func (e *executor) resolveEnvFiles(want map[string]config.Job) map[string]error {
	var errs map[string]error
	for id, j := range want {
		if j.Process.EnvFile == "" {
			continue
		}
		vals, err := e.envFiles.get(j.Process.EnvFile, e.log)
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
func (e *executor) envFailed(cur *job, j config.Job, err error) {
	nj := &job{spec: j, phase: plan.Failed, err: fmt.Sprintf("start: %v", err), permanent: true}
	if cur != nil {
		nj.claimed = cur.claimed
	}
	e.tbl.mu.Lock()
	e.tbl.jobs[j.ID] = nj
	delete(e.tbl.retries, j.ID)
	e.tbl.mu.Unlock()
	if cur == nil || cur.err != nj.err {
		e.log.Error("job failed to start; it is retried on reload or when its definition changes", "job_id", j.ID, "error", err)
	}
}
