package api

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
)

// Hidden stands for every environment value in the API's views: the name
// of a variable is shown, its value never (Kafka Connect's
// Password.HIDDEN, what it shows for a PASSWORD-type config).
const Hidden = spec.Hidden

// The states of connectors and tasks in Kafka Connect's words (its
// AbstractStatus.State; STOPPED from KIP-875).
const (
	StateUnassigned = "UNASSIGNED"
	StateRunning    = "RUNNING"
	StatePaused     = "PAUSED"
	StateStopped    = "STOPPED"
	StateRestarting = "RESTARTING"
	StateFailed     = "FAILED"
)

// connectorType is the "type" of every connector: Connect's ConnectorType
// is source, sink or unknown, and a berth connector is neither of the
// first two.
const connectorType = "unknown"

// ConnectState names a job's state as Kafka Connect names a task's:
//
//	running                          RUNNING
//	paused                           PAUSED
//	stopping, stopped                STOPPED
//	exited 0 (restart policy ended)  STOPPED
//	exited non-zero, killed by a signal or OOM-killed, not restarted: FAILED
//	failed (could not start)         FAILED
//	starting, backoff, restarting    RESTARTING
//	waiting (claim held elsewhere)   UNASSIGNED
//
// A dead task is never reported as healthy (docs/cases.md C17).
func ConnectState(j Job) string {
	switch j.State {
	case worker.Running:
		return StateRunning
	case worker.Paused:
		return StatePaused
	case worker.Failed:
		return StateFailed
	case worker.Exited:
		if j.LastExit != nil && j.LastExit.Code != 0 {
			return StateFailed // a non-zero status, a signal (Code -1), an OOM kill
		}
		return StateStopped
	case worker.Starting, worker.BackingOff, worker.Restarting:
		return StateRestarting
	case worker.Stopping, worker.Stopped:
		return StateStopped
	}
	return StateUnassigned // waiting for a claim
}

// jobStatus is j's JobStatus as its agent (workerID) reports it: the trace
// of a FAILED job, else the reason of a job that is not running.
func jobStatus(j Job, workerID string) JobStatus {
	st := JobStatus{State: ConnectState(j), WorkerID: workerID, Trace: j.Trace, FencingToken: j.FencingToken}
	if st.Trace == "" && st.State != StateRunning {
		st.Trace = j.Reason
	}
	return st
}

// connectorInfo is GET /connectors/{name}: berth's definition flattened
// into Connect-style dotted keys. A stopped connector lists no tasks
// (KIP-875).
func connectorInfo(c spec.Connector, target spec.TargetState) ConnectorInfo {
	tasks := []TaskRef{}
	if target != spec.TargetStopped {
		for i := 0; i < c.Tasks; i++ {
			tasks = append(tasks, TaskRef{Connector: c.Name, Task: i})
		}
	}
	return ConnectorInfo{Name: c.Name, Config: connectorConfig(c), Tasks: tasks, Type: connectorType}
}

// connectorConfig is GET /connectors/{name}/config: "name", "tasks.max",
// "group" and each process's keys under "run." and "task.".
func connectorConfig(c spec.Connector) map[string]string {
	cfg := map[string]string{"name": c.Name, "tasks.max": fmt.Sprint(c.Tasks)}
	if c.Group != "" {
		cfg["group"] = c.Group
	}
	for prefix, p := range map[string]*spec.Process{"run": c.Run, "task": c.Task} {
		if p != nil {
			flattenProcess(cfg, prefix, p)
		}
	}
	return cfg
}

// taskInfos is GET /connectors/{name}/tasks: each task's own job, its
// command expanded; none for a stopped connector (KIP-875).
func taskInfos(c spec.Connector, target spec.TargetState) []TaskInfo {
	out := []TaskInfo{}
	if target == spec.TargetStopped {
		return out
	}
	wl := spec.Workload{Connectors: []spec.Connector{c}}
	for _, j := range wl.Jobs(0) {
		if j.Kind != spec.KindTask {
			continue
		}
		cfg := map[string]string{"connector": c.Name, "task.id": fmt.Sprint(j.Task), "job.id": j.ID}
		flattenProcess(cfg, "task", &j.Process)
		out = append(out, TaskInfo{ID: TaskRef{Connector: c.Name, Task: j.Task}, Config: cfg})
	}
	return out
}

func flattenProcess(cfg map[string]string, prefix string, p *spec.Process) {
	enc := func(v any) string {
		var b strings.Builder
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(false) // commands hold & and <, kept as written
		_ = e.Encode(v)
		return strings.TrimSuffix(b.String(), "\n")
	}
	cfg[prefix+".command"] = enc(p.Command)
	cfg[prefix+".restart"] = string(p.Restart)
	if p.User != "" {
		cfg[prefix+".user"] = p.User
	}
	if p.Dir != "" {
		cfg[prefix+".working_directory"] = p.Dir
	}
	if p.StopTimeout > 0 {
		cfg[prefix+".stop_timeout"] = p.StopTimeout.String()
	}
	if p.KillMode != "" {
		cfg[prefix+".kill_mode"] = string(p.KillMode)
	}
	if p.KillSignal != "" {
		cfg[prefix+".kill_signal"] = string(p.KillSignal)
	}
	// Environment values are where operators keep passwords: the API
	// names them and never serves them, as Kafka Connect shows its
	// PASSWORD-type configs.
	for k := range p.Env {
		cfg[prefix+".env."+k] = Hidden
	}
	if p.EnvFile != "" {
		cfg[prefix+".env_file"] = p.EnvFile
	}
	// Every limit set (limits.Keys), its value as Go prints it; the io
	// entries as one JSON array.
	for _, k := range limits.Keys() {
		v, ok := k.Value(&p.Limits)
		switch {
		case !ok:
		case k.Kind == limits.KindDevices:
			cfg[prefix+".limits."+k.Name] = enc(v)
		default:
			cfg[prefix+".limits."+k.Name] = fmt.Sprint(v)
		}
	}
}

// clusterView is what a Connect status needs, read once per request
// however many connectors it reports: this agent's ID, the leader's, the
// member that runs each job (readView), the states the other members
// report for theirs and, for a request about every connector, this
// agent's jobs (withStates).
type clusterView struct {
	self, leader string
	owners       map[string]string // job ID -> member ID
	remote       map[string]Job    // jobs of the members that answered, by ID
	answered     map[string]bool   // members that answered, by ID
	// local holds this agent's jobs by ID when read all at once; nil:
	// each job is read alone (Backend.Job).
	local map[string]Job
}

// readView reads the published assignment (Backend.Assignment, page by
// page) into a clusterView, once per request. It returns the read's
// error.
func readView(ctx context.Context, b Backend) (clusterView, error) {
	a, err := b.Assignment(ctx)
	if err != nil {
		return clusterView{}, fmt.Errorf("read assignment: %w", err)
	}
	v := clusterView{self: b.AgentInfo().ID, leader: a.Leader, owners: map[string]string{}}
	for m, jobs := range a.Members {
		for _, j := range jobs {
			v.owners[j] = m
		}
	}
	return v, nil
}

// withStates is v with the states of the jobs the other members run
// (remoteStates: one request to each), and, when all, this agent's jobs
// read at once (Backend.Jobs), for a request that reports every
// connector: each job read once per request, not once per connector.
func (v clusterView) withStates(ctx context.Context, b Backend, all bool) clusterView {
	v.remote, v.answered = remoteStates(ctx, b, v.owners, v.self)
	if all {
		v.local = map[string]Job{}
		for _, j := range b.Jobs() {
			v.local[j.ID] = j
		}
	}
	return v
}

// localJob is this agent's job id, from v.local or read alone.
func (v clusterView) localJob(b Backend, id string) (Job, bool) {
	if v.local != nil {
		j, ok := v.local[id]
		return j, ok
	}
	return b.Job(id)
}

// connectorStatus is GET /connectors/{name}/status: each job's state as
// the agent that runs it reports it (its /v1/jobs), as a Connect worker
// reads its peers' statuses. A connector without its own job reports its
// target state; a stopped connector has no tasks (KIP-875).
func connectorStatus(b Backend, c spec.Connector, v clusterView) ConnectorStatus {
	self, owners, remote, answered := v.self, v.owners, v.remote, v.answered
	target := b.Target(c.Name)
	state := func(id string) JobStatus {
		owner := owners[id]
		switch {
		case owner == "":
			return JobStatus{State: StateUnassigned}
		case owner != self:
			if j, ok := remote[id]; ok {
				return jobStatus(j, owner)
			}
			// A paused or stopped connector's jobs are not run by their
			// owner: its target state, stored for every host, is their
			// state whether or not the owner answers (fenced, unreachable).
			if target == spec.TargetPaused || target == spec.TargetStopped {
				return JobStatus{State: targetState(target), WorkerID: owner}
			}
			if answered[owner] {
				return JobStatus{State: StateUnassigned, WorkerID: owner, Trace: "assigned to " + owner + ", not started there yet"}
			}
			return JobStatus{State: StateUnassigned, WorkerID: owner, Trace: "agent " + owner + " did not answer"}
		}
		j, ok := v.localJob(b, id)
		if !ok {
			return JobStatus{State: StateUnassigned, WorkerID: self, Trace: "about to start"}
		}
		return jobStatus(j, self)
	}
	out := ConnectorStatus{Name: c.Name, Type: connectorType, Tasks: []TaskStatus{}}
	if c.Run != nil {
		out.Connector = state(c.Name)
	} else {
		out.Connector = JobStatus{State: targetState(target), WorkerID: self}
		if v.leader != "" {
			out.Connector.WorkerID = v.leader
		}
	}
	if target == spec.TargetStopped {
		return out
	}
	for i := 0; i < c.Tasks; i++ {
		out.Tasks = append(out.Tasks, TaskStatus{ID: i, JobStatus: state(spec.TaskID(c.Name, i))})
	}
	return out
}

// targetState is a target state in Connect's words.
func targetState(t spec.TargetState) string {
	switch t {
	case spec.TargetPaused:
		return StatePaused
	case spec.TargetStopped:
		return StateStopped
	}
	return StateRunning
}

// remoteStates asks every other agent that owns a job (GET /v1/jobs at the
// address of its member record, 2 s at most) for its jobs' states.
func remoteStates(ctx context.Context, b Backend, owners map[string]string, self string) (map[string]Job, map[string]bool) {
	jobs, answered := map[string]Job{}, map[string]bool{}
	want := map[string]bool{}
	for _, o := range owners {
		if o != self {
			want[o] = true
		}
	}
	if len(want) == 0 {
		return jobs, answered
	}
	ms, err := b.Members(ctx)
	if err != nil {
		return jobs, answered
	}
	for _, m := range ms {
		if !want[m.ID] || m.Addr == "" {
			continue
		}
		cl, err := b.PeerClient(m.Addr)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		js, err := cl.Jobs(cctx)
		cancel()
		if err != nil {
			continue
		}
		answered[m.ID] = true
		for _, j := range js {
			jobs[j.ID] = j
		}
	}
	return jobs, answered
}
