package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/worker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// JobInfo is one job as GET /v1/jobs and GET /v1/jobs/{id} return it.
type JobInfo struct {
	ID        string       `json:"id"`
	Connector string       `json:"connector"`
	Kind      string       `json:"kind"`           // "connector" or "task"
	Task      *int         `json:"task,omitempty"` // task index; absent for a connector job
	Group     string       `json:"group,omitempty"`
	State     worker.State `json:"state"`
	Reason    string       `json:"reason,omitempty"` // why the job is failed
	PID       int          `json:"pid,omitempty"`
	Cgroup    string       `json:"cgroup"` // as /proc/PID/cgroup names it
	StartedAt *time.Time   `json:"started_at,omitempty"`
	Restarts  int          `json:"restarts"`
	// NextRestart is when a job in state backoff starts again.
	NextRestart *time.Time    `json:"next_restart,omitempty"`
	LastExit    *worker.Exit  `json:"last_exit,omitempty"`
	Limits      limits.Limits `json:"limits"`
	Usage       *Usage        `json:"usage,omitempty"`
	Command     []string      `json:"command"`
}

// Usage is a job's cgroup accounting at the time of the request.
type Usage struct {
	CPUSeconds       float64 `json:"cpu_seconds"`        // user + system, seconds
	MemoryBytes      uint64  `json:"memory_bytes"`       // charged to the cgroup, bytes
	MemoryLimitBytes uint64  `json:"memory_limit_bytes"` // 0: unlimited
	OOMKills         uint64  `json:"oom_kills"`
	Pids             uint64  `json:"pids"`
}

// Jobs returns every job this agent runs, sorted by ID.
func (a *Agent) Jobs() []JobInfo {
	a.mu.RLock()
	js := make([]*job, 0, len(a.jobs))
	for _, j := range a.jobs {
		js = append(js, j)
	}
	a.mu.RUnlock()
	sort.Slice(js, func(i, k int) bool { return js[i].spec.ID < js[k].spec.ID })
	out := make([]JobInfo, 0, len(js))
	for _, j := range js {
		out = append(out, a.jobInfo(j))
	}
	return out
}

func (a *Agent) jobInfo(j *job) JobInfo {
	a.mu.RLock()
	spec := j.spec
	a.mu.RUnlock()
	info := JobInfo{
		ID:        spec.ID,
		Connector: spec.Connector,
		Kind:      string(spec.Kind),
		Group:     spec.Group,
		Cgroup:    a.cgroupPath(spec),
		Limits:    spec.Process.Limits,
		Command:   spec.Process.Command,
	}
	if spec.Kind == limits.KindTask {
		t := spec.Task
		info.Task = &t
	}
	if j.holder != "" {
		info.State, info.Reason = Waiting, "claim held by "+j.holder
		if j.err != "" {
			info.Reason = j.err
		}
		return info
	}
	if j.w == nil {
		info.State, info.Reason = worker.Failed, j.err
		return info
	}
	st := j.w.Status()
	info.State, info.Reason, info.PID, info.Restarts, info.LastExit = st.State, st.Reason, st.PID, st.Restarts, st.LastExit
	if !st.StartedAt.IsZero() {
		t := st.StartedAt
		info.StartedAt = &t
	}
	if !st.NextRestart.IsZero() {
		t := st.NextRestart
		info.NextRestart = &t
	}
	if s, err := j.group.Stats(); err == nil {
		info.Usage = &Usage{
			CPUSeconds:       s.CPUUserSeconds + s.CPUSystemSeconds,
			MemoryBytes:      s.MemoryBytes,
			MemoryLimitBytes: s.MemoryLimitBytes,
			OOMKills:         s.OOMKills,
			Pids:             s.Pids,
		}
	}
	return info
}

// Handler serves the agent's HTTP API:
//
//	GET /metrics                       Prometheus text exposition
//	GET /v1/jobs                       every job (JobInfo, JSON array)
//	GET /v1/jobs/{id}                  one job; 404 when this agent does not run it
//	GET /connectors                    connector names (Kafka Connect shape)
//	GET /connectors/{name}             config and task IDs
//	GET /connectors/{name}/status      state and worker_id of the connector and each task
//	GET /healthz                       200 once the first reconcile finished
func (a *Agent) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.mu.Lock()
	a.reg = reg
	src := a.source
	a.mu.Unlock()
	if c, ok := src.(prometheus.Collector); ok {
		reg.MustRegister(c)
	}
	if c, err := a.newCollector(); err == nil {
		reg.MustRegister(c)
	} else {
		a.log.Error("procfs unavailable; per-job metrics off", "error", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogAdapter{a}, ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Jobs())
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		a.mu.RLock()
		j := a.jobs[id]
		a.mu.RUnlock()
		if j == nil {
			writeError(w, http.StatusNotFound, "job "+id+" is not run by this agent")
			return
		}
		writeJSON(w, http.StatusOK, a.jobInfo(j))
	})
	mux.HandleFunc("GET /connectors", func(w http.ResponseWriter, r *http.Request) {
		wl := a.workload()
		names := make([]string, 0, len(wl.Connectors))
		for _, c := range wl.Connectors {
			names = append(names, c.Name)
		}
		sort.Strings(names)
		writeJSON(w, http.StatusOK, names)
	})
	mux.HandleFunc("GET /connectors/{name}", func(w http.ResponseWriter, r *http.Request) {
		c, ok := a.connector(r.PathValue("name"))
		if !ok {
			writeError(w, http.StatusNotFound, "connector "+r.PathValue("name")+" not found")
			return
		}
		writeJSON(w, http.StatusOK, connectorInfo(c))
	})
	mux.HandleFunc("GET /connectors/{name}/status", func(w http.ResponseWriter, r *http.Request) {
		c, ok := a.connector(r.PathValue("name"))
		if !ok {
			writeError(w, http.StatusNotFound, "connector "+r.PathValue("name")+" not found")
			return
		}
		writeJSON(w, http.StatusOK, a.connectorStatus(r.Context(), c))
	})
	mux.HandleFunc("GET /v1/agent", func(w http.ResponseWriter, r *http.Request) {
		m := a.membership()
		if m == nil {
			writeJSON(w, http.StatusOK, AgentInfo{ID: a.Config().Agent.ID, State: StateJoining})
			return
		}
		writeJSON(w, http.StatusOK, m.Info())
	})
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		m := a.membership()
		if m == nil {
			writeError(w, http.StatusServiceUnavailable, "not a member of the cluster yet")
			return
		}
		ms, err := m.Members(r.Context())
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "read members: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, ms)
	})
	mux.HandleFunc("GET /v1/assignment", func(w http.ResponseWriter, r *http.Request) {
		m := a.membership()
		if m == nil {
			writeError(w, http.StatusServiceUnavailable, "not a member of the cluster yet")
			return
		}
		p := m.Published()
		conflicts := p.Assignment.Conflicts
		if conflicts == nil {
			conflicts = []assign.Conflict{}
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"generation": p.Generation,
			"leader":     p.Leader,
			"members":    p.Assignment.Members,
			"unassigned": p.Assignment.Unassigned,
			"conflicts":  conflicts,
		})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-a.ready:
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		default:
			writeError(w, http.StatusServiceUnavailable, "starting")
		}
	})
	return mux
}

// membership is the source as a view of the cluster; nil until the agent
// has joined.
func (a *Agent) membership() Membership {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.member
}

// workload is every connector and group the agent knows: the cluster's
// stored workload.
func (a *Agent) workload() *limits.Workload {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.desired.Workload != nil {
		return a.desired.Workload
	}
	return &limits.Workload{}
}

func (a *Agent) connector(name string) (limits.Connector, bool) {
	for _, c := range a.workload().Connectors {
		if c.Name == name {
			return c, true
		}
	}
	return limits.Connector{}, false
}

// connectorInfo is GET /connectors/{name} in Kafka Connect's shape:
// {"name", "config": {string: string}, "tasks": [{"connector", "task"}],
// "type"}. The config map flattens berth's definition into Connect-style
// dotted keys ("tasks.max", "task.command", "task.limits.memory", …); list
// values are JSON-encoded.
func connectorInfo(c limits.Connector) map[string]any {
	tasks := make([]map[string]any, 0, c.Tasks)
	for i := 0; i < c.Tasks; i++ {
		tasks = append(tasks, map[string]any{"connector": c.Name, "task": i})
	}
	cfg := map[string]string{"name": c.Name, "tasks.max": fmt.Sprint(c.Tasks)}
	if c.Group != "" {
		cfg["group"] = c.Group
	}
	for prefix, p := range map[string]*limits.Process{"run": c.Run, "task": c.Task} {
		if p == nil {
			continue
		}
		flattenProcess(cfg, prefix, p)
	}
	return map[string]any{"name": c.Name, "config": cfg, "tasks": tasks, "type": "berth"}
}

func flattenProcess(cfg map[string]string, prefix string, p *limits.Process) {
	enc := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	cfg[prefix+".command"] = enc(p.Command)
	cfg[prefix+".restart"] = string(p.Restart)
	if p.User != "" {
		cfg[prefix+".user"] = p.User
	}
	if p.Dir != "" {
		cfg[prefix+".dir"] = p.Dir
	}
	for k, v := range p.Env {
		cfg[prefix+".env."+k] = v
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

// connectorStatus is GET /connectors/{name}/status in Kafka Connect's
// shape; `state` uses Connect's words (RUNNING, FAILED, UNASSIGNED, …) and
// `worker_id` is the agent that runs the job.
func (a *Agent) connectorStatus(ctx context.Context, c limits.Connector) map[string]any {
	a.mu.RLock()
	self := a.cfg.Agent.ID
	owners := a.desired.Owners
	a.mu.RUnlock()
	remote := a.remoteStates(ctx, owners, self)
	state := func(id string) (string, string, string) {
		a.mu.RLock()
		j := a.jobs[id]
		a.mu.RUnlock()
		owner := owners[id]
		switch {
		case owner == "":
			return "UNASSIGNED", "", ""
		case owner != self:
			// Run by another agent: as its own API reports it.
			if st, ok := remote[id]; ok {
				return connectState(st.State), owner, st.Reason
			}
			if remote[answeredKey(owner)].ID != "" {
				return "UNASSIGNED", owner, "assigned to " + owner + ", not started there yet"
			}
			return "UNASSIGNED", owner, "agent " + owner + " did not answer"
		case j == nil:
			return "UNASSIGNED", self, "about to start"
		case j.holder != "":
			return "UNASSIGNED", self, "waiting for the claim held by " + j.holder
		case j.w == nil:
			return "FAILED", self, j.err
		}
		st := j.w.Status()
		return connectState(st.State), self, st.Reason
	}
	out := map[string]any{"name": c.Name, "type": "berth"}
	if c.Run != nil {
		s, w, trace := state(c.Name)
		out["connector"] = map[string]any{"state": s, "worker_id": w, "trace": trace}
	}
	tasks := make([]map[string]any, 0, c.Tasks)
	for i := 0; i < c.Tasks; i++ {
		s, w, trace := state(limits.TaskID(c.Name, i))
		tasks = append(tasks, map[string]any{"id": i, "state": s, "worker_id": w, "trace": trace})
	}
	out["tasks"] = tasks
	return out
}

// remoteStates asks every other agent that owns a job (GET /v1/jobs at the
// address of its member record, 2 s at most) for its jobs' states, as a
// Connect worker reads its peers' statuses.
func (a *Agent) remoteStates(ctx context.Context, owners map[string]string, self string) map[string]JobInfo {
	out := map[string]JobInfo{}
	want := map[string]bool{}
	for _, o := range owners {
		if o != self {
			want[o] = true
		}
	}
	member := a.membership()
	if len(want) == 0 || member == nil {
		return out
	}
	ms, err := member.Members(ctx)
	if err != nil {
		return out
	}
	client := &http.Client{Timeout: 2 * time.Second}
	for _, m := range ms {
		if !want[m.ID] || m.Addr == "" {
			continue
		}
		resp, err := client.Get("http://" + m.Addr + "/v1/jobs")
		if err != nil {
			continue
		}
		var js []JobInfo
		if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&js) == nil {
			out[answeredKey(m.ID)] = JobInfo{ID: m.ID}
			for _, j := range js {
				out[j.ID] = j
			}
		}
		resp.Body.Close()
	}
	return out
}

// answeredKey marks, in remoteStates' result, an agent that answered; "/"
// is never in a job ID.
func answeredKey(agent string) string { return "/answered/" + agent }

func connectState(s worker.State) string {
	switch s {
	case worker.Running:
		return "RUNNING"
	case worker.Failed:
		return "FAILED"
	case worker.Starting, worker.BackingOff:
		return "RESTARTING"
	case Waiting:
		return "UNASSIGNED"
	case worker.Stopping, worker.Stopped, worker.Exited:
		return "STOPPED"
	}
	return "UNASSIGNED"
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error_code": code, "message": msg})
}

// slogAdapter lets promhttp log through the agent's logger.
type slogAdapter struct{ a *Agent }

func (s slogAdapter) Println(v ...any) { s.a.log.Error("metrics exposition", "error", v) }
