package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/berthd/berth/spec"
)

// The operator actions in Kafka Connect's shapes and status codes: pause
// and resume (KIP-52: 202), stop (KIP-875: 204), restart of a connector
// (KIP-745: 204 for the connector alone, else 202 with the status showing
// what restarts) and of one task (204). Each stores the request in the
// cluster; the agents that run the jobs carry it out.

// requester names who asked, for the agents' logs and status: the client's
// address, who the listener authenticated it as (Identity), its user agent,
// and the agent that took the request.
func (s *server) requester(r *http.Request) string {
	self := s.b.AgentInfo().ID
	by := "api " + r.RemoteAddr
	if id := Identity(r, s.opts.WebConfigFile); id != "" {
		by += " as " + id
	}
	if ua := r.UserAgent(); ua != "" {
		by += " (" + ua + ")"
	}
	return by + " via agent " + self
}

// storeFailed answers a failed SetTarget or RequestRestarts: 404 when the
// connector is gone, else 500 (the store did not take the request).
func storeFailed(w http.ResponseWriter, name string, err error) {
	if errors.Is(err, ErrNotFound) {
		WriteError(w, http.StatusNotFound, "Connector "+name+" not found")
		return
	}
	WriteError(w, http.StatusInternalServerError, "the cluster store did not take the request: "+err.Error())
}

// setTarget is PUT /connectors/{name}/pause, /resume and /stop: store the
// target state, answer code with no body.
func (s *server) setTarget(state spec.TargetState, code int) http.HandlerFunc {
	return s.withConnector(func(w http.ResponseWriter, r *http.Request, c spec.Connector) {
		if err := s.b.SetTarget(r.Context(), c.Name, state, s.requester(r)); err != nil {
			storeFailed(w, c.Name, err)
			return
		}
		w.WriteHeader(code)
	})
}

// boolParam reads a boolean query parameter; absent is false.
func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errors.New("query parameter " + name + "=" + strconv.Quote(v) + ": want true or false")
	}
	return b, nil
}

// restartConnector is POST /connectors/{name}/restart (KIP-745). With
// neither includeTasks nor onlyFailed it restarts the connector's own job
// and answers 204 (409 when that job runs nowhere; a connector without its
// own job has nothing to restart). Otherwise it restarts the connector's
// job and, with includeTasks, its tasks — with onlyFailed only those that
// are FAILED — and answers 202 with the connector's status, RESTARTING for
// every job it restarts. Jobs that no agent runs, and the jobs of a paused
// or stopped connector, are not restarted.
func (s *server) restartConnector(w http.ResponseWriter, r *http.Request) {
	includeTasks, err1 := boolParam(r, "includeTasks")
	onlyFailed, err2 := boolParam(r, "onlyFailed")
	if err := errors.Join(err1, err2); err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.withConnector(func(w http.ResponseWriter, r *http.Request, c spec.Connector) {
		v, err := readView(r.Context(), s.b)
		if err != nil {
			WriteError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		owners := v.owners
		st := connectorStatus(s.b, c, v.withStates(r.Context(), s.b, false))
		running := s.b.Target(c.Name) == spec.TargetRunning
		var jobs []string
		pick := func(id string, js *JobStatus) {
			if running && owners[id] != "" && (!onlyFailed || js.State == StateFailed) {
				jobs = append(jobs, id)
				js.State, js.Trace = StateRestarting, ""
			}
		}
		if c.Run != nil {
			pick(c.Name, &st.Connector)
		}
		if includeTasks {
			for i := range st.Tasks {
				pick(spec.TaskID(c.Name, st.Tasks[i].ID), &st.Tasks[i].JobStatus)
			}
		}
		legacy := !includeTasks && !onlyFailed
		if legacy && running && c.Run != nil && len(jobs) == 0 {
			WriteError(w, http.StatusConflict, "Connector "+c.Name+" is not assigned to any agent")
			return
		}
		if len(jobs) > 0 {
			if err := s.b.RequestRestarts(r.Context(), c.Name, jobs, onlyFailed, s.requester(r)); err != nil {
				storeFailed(w, c.Name, err)
				return
			}
		}
		if legacy {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeJSON(w, http.StatusAccepted, st)
	})(w, r)
}

// restartTask is POST /connectors/{name}/tasks/{task}/restart: 204 once the
// request is stored; 404 for an unknown connector or task; 409 when no
// agent runs the task.
func (s *server) restartTask(w http.ResponseWriter, r *http.Request) {
	s.withConnector(func(w http.ResponseWriter, r *http.Request, c spec.Connector) {
		n, ok := task(w, r, c, s.b.Target(c.Name))
		if !ok {
			return
		}
		id := spec.TaskID(c.Name, n)
		v, err := readView(r.Context(), s.b)
		if err != nil {
			WriteError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		if v.owners[id] == "" {
			WriteError(w, http.StatusConflict, "Task "+id+" is not assigned to any agent")
			return
		}
		if err := s.b.RequestRestarts(r.Context(), c.Name, []string{id}, false, s.requester(r)); err != nil {
			storeFailed(w, c.Name, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})(w, r)
}
