package config

import (
	"log/slog"
	"sync"

	"github.com/berthd/berth/host"
)

// EnvFiles holds the values of the env_files an agent's jobs name, read on
// this host (ReadEnvFile): a file is read when a job first needs it, and read again
// at every reload (SIGHUP), so that a changed file restarts the jobs that
// use it, as a changed env in the agent file does. Between reloads a job
// (re)starts with the values read last. A file that cannot be read at a
// reload keeps the values read before, with an error in the log: a running
// job is never harmed by a file broken meanwhile. The definition in the
// store holds only the path. The zero value is ready to use.
type EnvFiles struct {
	mu    sync.Mutex
	files map[string]map[string]string // path -> values read since the last reload
	prev  map[string]map[string]string // before the last reload: fallback values
}

// Reload forgets what was read: every file is read again when next needed.
func (e *EnvFiles) Reload() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.prev, e.files = e.files, nil
}

// Get returns the values of the env_file at path (ReadEnvFile).
// Values read are kept until the next reload; a file that cannot be read
// is tried again at the next call (the job waits for it), unless values
// read before the last reload stand in for it.
func (e *EnvFiles) Get(path string, log *slog.Logger) (map[string]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if env, ok := e.files[path]; ok {
		return env, nil
	}
	env, err := host.ReadEnvFile(path)
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
