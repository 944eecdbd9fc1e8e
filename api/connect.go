package api

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/worker"
)

// Hidden stands for every environment value in the API's views: the name
// of a variable is shown, its value never (Kafka Connect's
// Password.HIDDEN, what it shows for a PASSWORD-type config).
const Hidden = config.Hidden

// connectorInfo is GET /connectors/{name}: berth's definition flattened
// into Connect-style dotted keys.
func connectorInfo(c config.Connector) ConnectorInfo {
	tasks := make([]TaskRef, 0, c.Tasks)
	for i := 0; i < c.Tasks; i++ {
		tasks = append(tasks, TaskRef{Connector: c.Name, Task: i})
	}
	cfg := map[string]string{"name": c.Name, "tasks.max": fmt.Sprint(c.Tasks)}
	if c.Group != "" {
		cfg["group"] = c.Group
	}
	for prefix, p := range map[string]*config.Process{"run": c.Run, "task": c.Task} {
		if p != nil {
			flattenProcess(cfg, prefix, p)
		}
	}
	return ConnectorInfo{Name: c.Name, Config: cfg, Tasks: tasks, Type: "berth"}
}

func flattenProcess(cfg map[string]string, prefix string, p *config.Process) {
	enc := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	cfg[prefix+".command"] = enc(p.Command)
	cfg[prefix+".restart"] = string(p.Restart)
	if p.User != "" {
		cfg[prefix+".user"] = p.User
	}
	if p.Dir != "" {
		cfg[prefix+".dir"] = p.Dir
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
	l := p.Limits
	set := func(k string, ok bool, v any) {
		if ok {
			cfg[prefix+".limits."+k] = fmt.Sprint(v)
		}
	}
	set("cpu", l.CPU > 0, l.CPU)
	set("cpu_weight", l.CPUWeight > 0, l.CPUWeight)
	set("cpuset", l.Cpuset != "", l.Cpuset)
	set("memory", l.Memory > 0, l.Memory)
	set("memory_high", l.MemoryHigh > 0, l.MemoryHigh)
	set("memory_swap", l.MemorySwap > 0, l.MemorySwap)
	set("pids", l.Pids > 0, l.Pids)
	set("io_weight", l.IOWeight > 0, l.IOWeight)
	if len(l.IO) > 0 {
		cfg[prefix+".limits.io"] = enc(l.IO)
	}
}

// connectorStatus is GET /connectors/{name}/status: each job's state as
// the agent that runs it reports it (its /v1/jobs), as a Connect worker
// reads its peers' statuses.
func connectorStatus(ctx context.Context, b Backend, c config.Connector) ConnectorStatus {
	self, owners := b.Owners()
	remote, answered := remoteStates(ctx, b, owners, self)
	local := map[string]Job{}
	for _, j := range b.Jobs() {
		local[j.ID] = j
	}
	state := func(id string) JobStatus {
		owner := owners[id]
		switch {
		case owner == "":
			return JobStatus{State: "UNASSIGNED"}
		case owner != self:
			if j, ok := remote[id]; ok {
				return JobStatus{State: connectState(j.State), WorkerID: owner, Trace: j.Reason}
			}
			if answered[owner] {
				return JobStatus{State: "UNASSIGNED", WorkerID: owner, Trace: "assigned to " + owner + ", not started there yet"}
			}
			return JobStatus{State: "UNASSIGNED", WorkerID: owner, Trace: "agent " + owner + " did not answer"}
		}
		j, ok := local[id]
		if !ok {
			return JobStatus{State: "UNASSIGNED", WorkerID: self, Trace: "about to start"}
		}
		return JobStatus{State: connectState(j.State), WorkerID: self, Trace: j.Reason}
	}
	out := ConnectorStatus{Name: c.Name, Type: "berth", Tasks: make([]TaskStatus, 0, c.Tasks)}
	if c.Run != nil {
		s := state(c.Name)
		out.Connector = &s
	}
	for i := 0; i < c.Tasks; i++ {
		out.Tasks = append(out.Tasks, TaskStatus{ID: i, JobStatus: state(config.TaskID(c.Name, i))})
	}
	return out
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

// connectState names a job state as Kafka Connect names task states.
func connectState(s worker.State) string {
	switch s {
	case worker.Running:
		return "RUNNING"
	case worker.Failed:
		return "FAILED"
	case worker.Starting, worker.BackingOff:
		return "RESTARTING"
	case worker.Stopping, worker.Stopped, worker.Exited:
		return "STOPPED"
	}
	return "UNASSIGNED" // waiting for a claim
}
