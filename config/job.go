package config

import "github.com/berthd/berth/spec"

// Job is spec.Job, for the transition (new code uses spec's).
type Job = spec.Job

// Jobs returns every job of every connector of the agent file, sorted by
// ID, with [agent] stop_timeout as the default stop timeout.
func (c *Config) Jobs() []Job {
	return c.Workload.Jobs(c.Agent.StopTimeout)
}
