package spec

import (
	"slices"
	"sort"
	"strconv"
	"time"
)

// Job is one unit that is assigned, run and measured: a connector's own
// job ([connector.run]) or one of its tasks.
type Job struct {
	// ID is the connector name, or "<connector>-<n>" for task n.
	ID string
	// Connector is the connector's name.
	Connector string
	// Kind says whether the job is the connector's own or one of its tasks.
	Kind Kind
	// Task is the task index, -1 for a connector job.
	Task int
	// Group is the sharing group's name, or "".
	Group string
	// Process is the connector's run or task process with ${...}
	// references in Command expanded for this job, Env copied, and
	// StopTimeout, KillMode and KillSignal set to the effective values
	// (the process's own, else the
	// default passed to Jobs).
	Process Process
}

// ProcessDefaults are the values of [agent] that a process inherits when
// it does not set its own.
type ProcessDefaults struct {
	// StopTimeout is stop_timeout; 0 leaves a process's 0 as it is.
	StopTimeout time.Duration
	// KillMode is kill_mode; "" means DefaultKillMode.
	KillMode KillMode
	// KillSignal is kill_signal; "" means DefaultKillSignal.
	KillSignal Signal
}

// Jobs returns every job of every connector of w, sorted by ID: the
// connector's own job when it has a [connector.run], and tasks 0..tasks-1
// from [connector.task]. stopTimeout is used where a process sets none,
// and DefaultKillMode and DefaultKillSignal likewise. The workload must
// have been validated (commands expand without error).
func (w *Workload) Jobs(stopTimeout time.Duration) []Job {
	return w.JobsWithDefaults(ProcessDefaults{StopTimeout: stopTimeout})
}

// JobsWithDefaults is Jobs with every value a process inherits from
// [agent] given in d.
func (w *Workload) JobsWithDefaults(d ProcessDefaults) []Job {
	if d.KillMode == "" {
		d.KillMode = DefaultKillMode
	}
	if d.KillSignal == "" {
		d.KillSignal = DefaultKillSignal
	}
	var jobs []Job
	for _, c := range w.Connectors {
		if c.Run != nil {
			jobs = append(jobs, c.job(c.Name, -1, c.Run, d))
		}
		if c.Task != nil {
			for n := 0; n < c.Tasks; n++ {
				jobs = append(jobs, c.job(TaskID(c.Name, n), n, c.Task, d))
			}
		}
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
	return jobs
}

func (c Connector) job(id string, task int, p *Process, d ProcessDefaults) Job {
	j := Job{ID: id, Connector: c.Name, Kind: KindConnector, Task: task, Group: c.Group, Process: *p}
	if task >= 0 {
		j.Kind = KindTask
	}
	vars := j.vars()
	j.Process.Command = make([]string, len(p.Command))
	for i, arg := range p.Command {
		// Validation has rejected every argument that does not expand.
		j.Process.Command[i], _ = Expand(arg, vars)
	}
	if p.Env != nil {
		j.Process.Env = make(map[string]string, len(p.Env))
		for k, v := range p.Env {
			j.Process.Env[k] = v
		}
	}
	j.Process.Limits.IO = slices.Clone(p.Limits.IO)
	if j.Process.StopTimeout == 0 {
		j.Process.StopTimeout = d.StopTimeout
	}
	if j.Process.KillMode == "" {
		j.Process.KillMode = d.KillMode
	}
	if j.Process.KillSignal == "" {
		j.Process.KillSignal = d.KillSignal
	}
	return j
}

// vars are the BERTH_* values of the job other than BERTH_CGROUP.
func (j Job) vars() map[string]string {
	task := ""
	if j.Task >= 0 {
		task = strconv.Itoa(j.Task)
	}
	return map[string]string{EnvJobID: j.ID, EnvConnector: j.Connector, EnvTask: task}
}

// Env returns the job's environment as sorted "KEY=VALUE" strings: the
// process's env plus BERTH_JOB_ID, BERTH_CONNECTOR, BERTH_TASK (the task
// index, "" for a connector job) and BERTH_CGROUP = cgroupPath, the job's
// cgroup path, known only when the worker starts. It does not include the
// agent's own environment.
func (j Job) Env(cgroupPath string) []string {
	vars := j.vars()
	vars[EnvCgroup] = cgroupPath
	for k, v := range j.Process.Env {
		if !ReservedEnv(k) {
			vars[k] = v
		}
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}
