package config

import "github.com/berthd/berth/spec"

// ProcessDefaults returns what a job's process inherits from [agent]:
// stop_timeout, kill_mode and kill_signal.
func (a Agent) ProcessDefaults() spec.ProcessDefaults {
	return spec.ProcessDefaults{StopTimeout: a.StopTimeout, KillMode: a.KillMode, KillSignal: a.KillSignal}
}

// Jobs returns every job of every connector of the agent file, sorted by
// ID, with [agent]'s stop_timeout, kill_mode and kill_signal as the
// defaults of every process.
func (c *Config) Jobs() []spec.Job {
	return c.Workload.JobsWithDefaults(c.Agent.ProcessDefaults())
}
