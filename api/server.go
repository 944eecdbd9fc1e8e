package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/berthd/berth/spec"
)

// ErrNotFound is wrapped by a Backend's SetTarget and RequestRestarts when
// the connector does not exist (anymore).
var ErrNotFound = errors.New("not found")

// ErrNotMember is wrapped by a Backend's Assignment before the agent has
// joined its cluster.
var ErrNotMember = errors.New("not a member of the cluster yet")

// Backend is what the handler needs of the agent.
type Backend interface {
	// Jobs returns every job this agent runs, sorted by ID.
	Jobs() []Job
	// Job returns one job; false when this agent does not run it.
	Job(id string) (Job, bool)
	// AgentInfo describes the agent as a member.
	AgentInfo() Agent
	// Reconciled reports whether the agent has finished its first
	// reconcile (it is ready): it is a member and every job of its first
	// assignment has been started or adopted (or has failed with a reason).
	Reconciled() bool
	// Healthy reports whether the agent's loop is waiting for work or has
	// been on one pass for less than its bound (the test the service
	// manager's watchdog is fed by); true before the loop runs.
	Healthy() bool
	// Members lists the live members; an error when the store cannot be
	// read or the agent has not joined yet.
	Members(ctx context.Context) ([]Member, error)
	// Assignment reads the whole published assignment from the cluster's
	// store (page by page: data proportional to the cluster). It returns
	// an error wrapping ErrNotMember before the agent has joined, or a
	// store error.
	Assignment(ctx context.Context) (Assignment, error)
	// Workload reads every connector and group stored in the cluster
	// (page by page). It returns a store error.
	Workload(ctx context.Context) (*spec.Workload, error)
	// Groups returns the sharing groups that have jobs on this agent,
	// sorted by name.
	Groups() []Group
	// Target is connector's target state as the agent last read it from
	// the store; spec.TargetRunning when none was set.
	Target(connector string) spec.TargetState
	// SetTarget stores connector's target state for every agent; by says
	// who asked. It returns an error wrapping ErrNotFound when the
	// connector does not exist, another error when the store cannot be
	// written.
	SetTarget(ctx context.Context, connector string, state spec.TargetState, by string) error
	// RequestRestarts stores a restart request for each of jobs, all of
	// connector, carried out once by each job's agent (KIP-745; with
	// onlyFailed only if the job is FAILED then). Errors as SetTarget.
	RequestRestarts(ctx context.Context, connector string, jobs []string, onlyFailed bool, by string) error
	// PeerClient returns a client for the API of another agent at addr
	// (its member record's address: host:port, or https://host:port when
	// it serves TLS) with this agent's [agent.client] credentials; an
	// error when they cannot be loaded.
	PeerClient(addr string) (*Client, error)
}

// Options configure the handler beyond its Backend.
type Options struct {
	// Metrics serves GET /metrics; nil: no metrics.
	Metrics http.Handler
	// Listen is the address the API is served on (host:port). The write
	// endpoints answer when it is a loopback address, or when the request
	// is authenticated (see allowWrite).
	Listen string
	// WebConfigFile is the listener's web configuration file
	// (agent.web_config_file; "" for none): whether it lists basic-auth
	// users decides whether basic-auth credentials authenticate a write.
	WebConfigFile string
	// Version and Commit are the agent's build, for GET /.
	Version, Commit string
	// Cluster is the berth cluster's name, GET /'s kafka_cluster_id.
	Cluster string
	// AllowedHosts are the host names (a port, if given, is ignored) that
	// plain-HTTP requests may name in their Host header besides an IP
	// address, localhost, this host's name and Listen's host: the
	// configured agent.listen and agent.allowed_hosts. "*" allows every
	// name. Other names are answered 421 (see guardOrigin).
	AllowedHosts []string
	// Log receives a line for each request the guards refuse; nil:
	// slog.Default().
	Log *slog.Logger
	// Recommender serves GET /v1/recommendations; nil: it answers 404.
	Recommender Recommender
}

// server is the handler's state.
type server struct {
	b    Backend
	opts Options
}

// Handler serves the agent's API over b:
//
//	GET  /                                 version and commit (ServerInfo); the status page (HTML) when Accept prefers text/html
//	GET  /metrics                          Prometheus text exposition
//	GET  /v1/jobs                          every job (Job, JSON array)
//	GET  /v1/jobs/{id}                     one job; 404 when this agent does not run it
//	GET  /v1/agent                         this agent as a member, its config file and last reload (Agent)
//	GET  /v1/groups                        the sharing groups with jobs here: limits, jobs, usage (Group, JSON array)
//	GET  /v1/members                       every live member (Member, JSON array)
//	GET  /v1/assignment                    the published assignment (Assignment)
//	GET  /v1/recommendations               recommended limits of ?job=ID and ?connector=NAME (repeatable; none: every job) (Recommendations)
//	GET  /connectors                       connector names; ?expand=status, ?expand=info: a map of ConnectorExpanded
//	GET  /connectors/{name}                config and task IDs (ConnectorInfo)
//	GET  /connectors/{name}/config         the config map alone
//	GET  /connectors/{name}/status         ConnectorStatus
//	GET  /connectors/{name}/tasks          TaskInfo, JSON array
//	GET  /connectors/{name}/tasks/{id}/status  TaskStatus
//	PUT  /connectors/{name}/pause          202: its jobs stop and show PAUSED, on every agent, until resume
//	PUT  /connectors/{name}/resume         202: they run again
//	PUT  /connectors/{name}/stop           204: as pause, and the connector shows STOPPED with no tasks (KIP-875)
//	POST /connectors/{name}/restart        KIP-745: ?includeTasks=&onlyFailed=; 204 (connector only) or 202 with the status
//	POST /connectors/{name}/tasks/{id}/restart  204
//	GET  /connector-plugins                []: no plugin is installed on a berth agent
//	GET  /health                           KIP-1017 WorkerStatus: 200 healthy, 503 starting, 500 unhealthy (see health)
//	GET  /healthz                          200 once the first reconcile finished, else 503
//
// These are Kafka Connect's paths, shapes and status codes (its REST
// reference, KIP-52, KIP-745, KIP-875, KIP-1017). Every error answer,
// unknown paths (404) and wrong methods (405, with Allow) included, is a
// JSON Error, but GET /health's, which is a WorkerStatus as in Connect. The
// writes answer only where allowWrite says so (403 otherwise): on a
// loopback address, or to an authenticated request. Before any of this, a
// plain-HTTP request for a host name the agent does not answer to is
// refused with 421, and a write a browser sends for a page of another
// origin with 403 (guardOrigin).
func Handler(b Backend, opts Options) http.Handler {
	s := &server{b: b, opts: opts}
	mux := http.NewServeMux()
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	// GET /: Connect's server info as JSON, the status page to a browser.
	mux.Handle("GET /{$}", statusPage(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, ServerInfo{Version: opts.Version, Commit: opts.Commit, KafkaClusterID: opts.Cluster})
	})))
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.Jobs())
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		j, ok := b.Job(id)
		if !ok {
			WriteError(w, http.StatusNotFound, "job "+id+" is not run by this agent")
			return
		}
		writeJSON(w, http.StatusOK, j)
	})
	mux.HandleFunc("GET /v1/agent", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.AgentInfo())
	})
	mux.HandleFunc("GET /v1/groups", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.Groups())
	})
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		ms, err := b.Members(r.Context())
		if err != nil {
			WriteError(w, http.StatusServiceUnavailable, "read members: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, ms)
	})
	mux.HandleFunc("GET /v1/assignment", func(w http.ResponseWriter, r *http.Request) {
		a, err := b.Assignment(r.Context())
		if err != nil {
			WriteError(w, http.StatusServiceUnavailable, "read assignment: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, a)
	})
	mux.HandleFunc("GET /v1/recommendations", recommendations(opts.Recommender))
	mux.HandleFunc("GET /connectors", s.listConnectors)
	mux.HandleFunc("GET /connectors/{name}", s.withConnector(func(w http.ResponseWriter, r *http.Request, c spec.Connector) {
		writeJSON(w, http.StatusOK, connectorInfo(c, b.Target(c.Name)))
	}))
	mux.HandleFunc("GET /connectors/{name}/config", s.withConnector(func(w http.ResponseWriter, r *http.Request, c spec.Connector) {
		writeJSON(w, http.StatusOK, connectorConfig(c))
	}))
	mux.HandleFunc("GET /connectors/{name}/status", s.withConnector(func(w http.ResponseWriter, r *http.Request, c spec.Connector) {
		v, err := readView(r.Context(), b)
		if err != nil {
			WriteError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, connectorStatus(b, c, v.withStates(r.Context(), b, false)))
	}))
	mux.HandleFunc("GET /connectors/{name}/tasks", s.withConnector(func(w http.ResponseWriter, r *http.Request, c spec.Connector) {
		writeJSON(w, http.StatusOK, taskInfos(c, b.Target(c.Name)))
	}))
	mux.HandleFunc("GET /connectors/{name}/tasks/{task}/status", s.withConnector(s.taskStatus))
	mux.HandleFunc("PUT /connectors/{name}/pause", s.write(s.setTarget(spec.TargetPaused, http.StatusAccepted)))
	mux.HandleFunc("PUT /connectors/{name}/resume", s.write(s.setTarget(spec.TargetRunning, http.StatusAccepted)))
	mux.HandleFunc("PUT /connectors/{name}/stop", s.write(s.setTarget(spec.TargetStopped, http.StatusNoContent)))
	mux.HandleFunc("POST /connectors/{name}/restart", s.write(s.restartConnector))
	mux.HandleFunc("POST /connectors/{name}/tasks/{task}/restart", s.write(s.restartTask))
	mux.HandleFunc("GET /connector-plugins", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, []struct{}{})
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		code, st := health(b)
		writeJSON(w, code, st)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !b.Reconciled() {
			WriteError(w, http.StatusServiceUnavailable, "starting")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return guardOrigin(canonicalOnly(routed(mux)), newHostGuard(opts.Listen, opts.AllowedHosts), log)
}

// health is GET /health's status code and answer, as a Kafka Connect
// worker gives them (KIP-1017): 503 "starting" until b has reconciled (it
// joined the cluster and started or adopted every job of its first
// assignment), then 200 "healthy" while its loop is within its bound, 500
// "unhealthy" when it is not. Connect bounds the check at 10 s, since it
// waits for its herder's thread to take it; this one waits for nothing
// (it reads the loop's state, never asks the loop), so it always answers
// within that bound, and a loop stuck past its own bound is a 500 rather
// than a probe that times out.
func health(b Backend) (int, WorkerStatus) {
	switch {
	case !b.Reconciled():
		return http.StatusServiceUnavailable, WorkerStatus{Status: HealthStarting, Message: startingMessage}
	case !b.Healthy():
		return http.StatusInternalServerError, WorkerStatus{Status: HealthUnhealthy, Message: unhealthyMessage}
	default:
		return http.StatusOK, WorkerStatus{Status: HealthHealthy, Message: healthyMessage}
	}
}

// canonicalOnly answers a request whose path is not in canonical form
// ("/v1//jobs", "/v1/jobs/../agent", "*") with a JSON 404 instead of
// letting the mux answer it with an HTML redirect or an empty 400: every
// answer of the API is JSON.
func canonicalOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if r.Method != http.MethodConnect && (p == "" || p[0] != '/' || cleanPath(p) != p) {
			WriteError(w, http.StatusNotFound, "HTTP 404 Not Found: no such resource: "+r.Method+" "+p+" (not a canonical path)")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// cleanPath is the canonical form of a request path as http.ServeMux
// defines it: path.Clean, keeping a trailing slash.
func cleanPath(p string) string {
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// routed serves mux, answering a request no pattern takes with a JSON
// Error: 405 with Allow when the path exists for other methods, else 404.
func routed(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			WriteError(w, http.StatusMethodNotAllowed, "HTTP 405 Method Not Allowed: "+r.Method+" "+r.URL.Path+" (allowed: "+strings.Join(allow, ", ")+")")
			return
		}
		WriteError(w, http.StatusNotFound, "HTTP 404 Not Found: no such resource: "+r.Method+" "+r.URL.Path)
	})
}

// listConnectors is GET /connectors: the sorted names, or with expand=status
// and/or expand=info a map of each connector's ConnectorExpanded.
func (s *server) listConnectors(w http.ResponseWriter, r *http.Request) {
	wl, err := s.b.Workload(r.Context())
	if err != nil {
		WriteError(w, http.StatusServiceUnavailable, "read connectors: "+err.Error())
		return
	}
	var info, status bool
	for _, e := range r.URL.Query()["expand"] {
		switch strings.ToLower(e) {
		case "info":
			info = true
		case "status":
			status = true
		}
	}
	if !info && !status {
		names := make([]string, 0, len(wl.Connectors))
		for _, c := range wl.Connectors {
			names = append(names, c.Name)
		}
		sort.Strings(names)
		writeJSON(w, http.StatusOK, names)
		return
	}
	var v clusterView
	if status {
		if v, err = readView(r.Context(), s.b); err != nil {
			WriteError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		v = v.withStates(r.Context(), s.b, true)
	}
	out := map[string]ConnectorExpanded{}
	for _, c := range wl.Connectors {
		var e ConnectorExpanded
		if info {
			ci := connectorInfo(c, s.b.Target(c.Name))
			e.Info = &ci
		}
		if status {
			cs := connectorStatus(s.b, c, v)
			e.Status = &cs
		}
		out[c.Name] = e
	}
	writeJSON(w, http.StatusOK, out)
}

// withConnector runs f with the connector named by the path, or answers
// 404.
func (s *server) withConnector(f func(http.ResponseWriter, *http.Request, spec.Connector)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok, err := connector(r.Context(), s.b, r.PathValue("name"))
		if err != nil {
			WriteError(w, http.StatusServiceUnavailable, "read connectors: "+err.Error())
			return
		}
		if !ok {
			WriteError(w, http.StatusNotFound, "Connector "+r.PathValue("name")+" not found")
			return
		}
		f(w, r, c)
	}
}

// task returns the index of the task named by the path, or answers 404.
func task(w http.ResponseWriter, r *http.Request, c spec.Connector, target spec.TargetState) (int, bool) {
	n, err := strconv.Atoi(r.PathValue("task"))
	if err != nil || n < 0 || n >= c.Tasks || strconv.Itoa(n) != r.PathValue("task") || target == spec.TargetStopped {
		WriteError(w, http.StatusNotFound, "Task "+c.Name+"-"+r.PathValue("task")+" not found")
		return 0, false
	}
	return n, true
}

// taskStatus is GET /connectors/{name}/tasks/{task}/status.
func (s *server) taskStatus(w http.ResponseWriter, r *http.Request, c spec.Connector) {
	n, ok := task(w, r, c, s.b.Target(c.Name))
	if !ok {
		return
	}
	v, err := readView(r.Context(), s.b)
	if err != nil {
		WriteError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	for _, t := range connectorStatus(s.b, c, v.withStates(r.Context(), s.b, false)).Tasks {
		if t.ID == n {
			writeJSON(w, http.StatusOK, t)
			return
		}
	}
	WriteError(w, http.StatusNotFound, "No status found for task "+spec.TaskID(c.Name, n))
}

// connector reads the stored connector name; false when there is none.
func connector(ctx context.Context, b Backend, name string) (spec.Connector, bool, error) {
	wl, err := b.Workload(ctx)
	if err != nil {
		return spec.Connector{}, false, err
	}
	for _, c := range wl.Connectors {
		if c.Name == name {
			return c, true, nil
		}
	}
	return spec.Connector{}, false, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // JSON, not HTML: traces and commands as written
	_ = enc.Encode(v)
}

// WriteError writes an Error with code and message as the JSON answer.
func WriteError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, Error{Code: code, Message: msg})
}

func itoa(n int) string { return strconv.Itoa(n) }
