package api

import (
	"context"
	"encoding/json"
	"net/http"
	"path"
	"sort"
	"strconv"

	"github.com/berthd/berth/config"
)

// Backend is what the handler needs of the agent.
type Backend interface {
	// Jobs returns every job this agent runs, sorted by ID.
	Jobs() []Job
	// Job returns one job; false when this agent does not run it.
	Job(id string) (Job, bool)
	// AgentInfo describes the agent as a member.
	AgentInfo() Agent
	// Reconciled reports whether the agent has finished its first
	// reconcile (it is ready).
	Reconciled() bool
	// Members lists the live members; an error when the store cannot be
	// read or the agent has not joined yet.
	Members(ctx context.Context) ([]Member, error)
	// Assignment is the published assignment; false before the agent has
	// joined.
	Assignment() (Assignment, bool)
	// Workload is every connector and group the agent knows.
	Workload() *config.Workload
	// Owners returns this agent's ID and the member that runs each
	// assigned job.
	Owners() (self string, owners map[string]string)
}

// Handler serves the agent's API over b, and metrics at /metrics:
//
//	GET /metrics                   Prometheus text exposition
//	GET /v1/jobs                   every job (Job, JSON array)
//	GET /v1/jobs/{id}              one job; 404 when this agent does not run it
//	GET /v1/agent                  this agent as a member (Agent)
//	GET /v1/members                every live member (Member, JSON array)
//	GET /v1/assignment             the published assignment (Assignment)
//	GET /connectors                connector names (Kafka Connect shape)
//	GET /connectors/{name}         config and task IDs (ConnectorInfo)
//	GET /connectors/{name}/status  state and worker_id of the connector and each task
//	GET /healthz                   200 once the first reconcile finished, else 503
//
// Every error answer is a JSON Error.
func Handler(b Backend, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
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
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		ms, err := b.Members(r.Context())
		if err != nil {
			WriteError(w, http.StatusServiceUnavailable, "read members: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, ms)
	})
	mux.HandleFunc("GET /v1/assignment", func(w http.ResponseWriter, r *http.Request) {
		a, ok := b.Assignment()
		if !ok {
			WriteError(w, http.StatusServiceUnavailable, "not a member of the cluster yet")
			return
		}
		writeJSON(w, http.StatusOK, a)
	})
	mux.HandleFunc("GET /connectors", func(w http.ResponseWriter, r *http.Request) {
		wl := b.Workload()
		names := make([]string, 0, len(wl.Connectors))
		for _, c := range wl.Connectors {
			names = append(names, c.Name)
		}
		sort.Strings(names)
		writeJSON(w, http.StatusOK, names)
	})
	mux.HandleFunc("GET /connectors/{name}", func(w http.ResponseWriter, r *http.Request) {
		c, ok := connector(b, r.PathValue("name"))
		if !ok {
			WriteError(w, http.StatusNotFound, "connector "+r.PathValue("name")+" not found")
			return
		}
		writeJSON(w, http.StatusOK, connectorInfo(c))
	})
	mux.HandleFunc("GET /connectors/{name}/status", func(w http.ResponseWriter, r *http.Request) {
		c, ok := connector(b, r.PathValue("name"))
		if !ok {
			WriteError(w, http.StatusNotFound, "connector "+r.PathValue("name")+" not found")
			return
		}
		writeJSON(w, http.StatusOK, connectorStatus(r.Context(), b, c))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !b.Reconciled() {
			WriteError(w, http.StatusServiceUnavailable, "starting")
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "no such resource: "+r.Method+" "+r.URL.Path)
	})
	return canonicalOnly(mux)
}

// canonicalOnly answers a request whose path is not in canonical form
// ("/v1//jobs", "/v1/jobs/../agent", "*") with a JSON 404 instead of
// letting the mux answer it with an HTML redirect or an empty 400: every
// answer of the API is JSON.
func canonicalOnly(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if r.Method != http.MethodConnect && (p == "" || p[0] != '/' || cleanPath(p) != p) {
			WriteError(w, http.StatusNotFound, "no such resource: "+r.Method+" "+p+" (not a canonical path)")
			return
		}
		mux.ServeHTTP(w, r)
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

func connector(b Backend, name string) (config.Connector, bool) {
	for _, c := range b.Workload().Connectors {
		if c.Name == name {
			return c, true
		}
	}
	return config.Connector{}, false
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError writes an Error with code and message as the JSON answer.
func WriteError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, Error{Code: code, Message: msg})
}

func itoa(n int) string { return strconv.Itoa(n) }
