package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
)

// fakeBackend is an agent as the handler sees it, in one of the states
// the bits of mode select: ready or starting (1), a member or joining (2),
// its members readable or not (4), writes allowed by its listen address
// or not (8), connector "idle" stopped (16), the store refusing writes
// (32), its loop stuck past its bound (64).
type fakeBackend struct{ mode byte }

func (b fakeBackend) Jobs() []Job {
	task := 0
	started := time.Unix(1_700_000_000, 0).UTC()
	return []Job{
		{ID: "sink", Connector: "sink", Kind: "connector", State: worker.Running, PID: 42, Cgroup: "/berth/jobs/sink",
			StartedAt: &started, Limits: limits.Limits{Memory: 64 << 20}, Command: []string{"/bin/sleep", "1"}},
		{ID: "sink-0", Connector: "sink", Kind: "task", Task: &task, State: worker.Failed, Reason: "exec: not found",
			Cgroup: "/berth/jobs/sink-0", Command: []string{"x"}},
	}
}

func (b fakeBackend) Job(id string) (Job, bool) {
	for _, j := range b.Jobs() {
		if j.ID == id {
			return j, true
		}
	}
	return Job{}, false
}

func (b fakeBackend) AgentInfo() Agent {
	if b.mode&2 == 0 {
		return Agent{ID: "a", State: "joining"}
	}
	return Agent{ID: "a", State: "member", Leader: true, Generation: 7}
}

func (b fakeBackend) Reconciled() bool { return b.mode&1 != 0 }

func (b fakeBackend) Healthy() bool { return b.mode&64 == 0 }

func (b fakeBackend) Members(context.Context) ([]Member, error) {
	if b.mode&4 == 0 {
		return nil, errors.New("store unreachable")
	}
	return []Member{{ID: "a", Protocol: "static", Connectors: []string{"sink"}, Tasks: []string{"sink-0", "sink-1"}}}, nil
}

func (b fakeBackend) Assignment(context.Context) (Assignment, error) {
	if b.mode&2 == 0 {
		return Assignment{}, ErrNotMember
	}
	return Assignment{Generation: 7, Leader: "a", Members: map[string][]string{"a": {"sink", "sink-0"}, "b": {"sink-1"}},
		Unassigned: map[string]string{}, Conflicts: []Conflict{}}, nil
}

func (b fakeBackend) Workload(context.Context) (*spec.Workload, error) {
	return &spec.Workload{Connectors: []spec.Connector{
		{Name: "sink", Tasks: 2, Run: &spec.Process{Command: []string{"/bin/sleep", "1"}, Restart: spec.RestartAlways,
			Env: map[string]string{"URL": "http://x"}}, Task: &spec.Process{Command: []string{"x"}, Restart: spec.RestartOnFailure}},
		{Name: "idle", Tasks: 0},
	}}, nil
}

func (b fakeBackend) Groups() []Group {
	return []Group{{Name: "g", Cgroup: "/berth/jobs/g-g", Limits: limits.Limits{Memory: 1 << 30}, Jobs: []string{}}}
}

func (b fakeBackend) Target(connector string) spec.TargetState {
	if connector == "idle" && b.mode&16 != 0 {
		return spec.TargetStopped
	}
	return spec.TargetRunning
}

func (b fakeBackend) SetTarget(_ context.Context, connector string, _ spec.TargetState, _ string) error {
	if connector != "sink" && connector != "idle" {
		return fmt.Errorf("connector %s: %w", connector, ErrNotFound)
	}
	if b.mode&32 != 0 {
		return errors.New("store unreachable")
	}
	return nil
}

func (b fakeBackend) RequestRestarts(ctx context.Context, connector string, _ []string, _ bool, by string) error {
	return b.SetTarget(ctx, connector, spec.TargetRunning, by)
}

// methodToken is what net/http's server lets through to a handler as a
// method; other requests are answered 400 before any handler runs.
var methodToken = regexp.MustCompile(`^[A-Za-z]{1,16}$`)

// FuzzHandler serves random methods, paths and queries (any request the
// HTTP server would hand to a handler) over a fake agent in every state:
// the handler never panics, every answer is JSON (Content-Type
// application/json, a body that parses), and an error answer is Connect's
// {"error_code", "message"} with error_code equal to the status (a 204,
// and a 202 to a write, have no body, as in Kafka Connect), but GET
// /health's, which is KIP-1017's WorkerStatus.
// Seed corpus: testdata/fuzz/FuzzHandler.
func FuzzHandler(f *testing.F) {
	for _, s := range []struct {
		method, target string
		mode           byte
	}{
		{"GET", "/v1/jobs", 7}, {"GET", "/v1/jobs/sink-0", 7}, {"GET", "/v1/jobs/nope?x=1", 0},
		{"GET", "/v1/agent", 0}, {"GET", "/v1/members", 3}, {"GET", "/v1/assignment", 0},
		{"GET", "/connectors", 7}, {"GET", "/connectors/sink?expand=status", 7}, {"GET", "/connectors/sink/status", 7},
		{"GET", "/connectors/idle/status", 1}, {"GET", "/healthz", 0}, {"POST", "/v1/jobs", 7},
		{"GET", "/health", 0}, {"GET", "/health", 7}, {"GET", "/health", 71}, {"GET", "/connector-plugins?connectorsOnly=false", 0},
		{"DELETE", "/connectors/sink", 7}, {"GET", "/v1//jobs", 7}, {"GET", "/v1/jobs/%2e%2e/agent", 7},
		{"HEAD", "/metrics", 7}, {"GET", "*", 7}, {"GET", "/", 7}, {"GET", "/v1/groups", 7},
		{"PUT", "/connectors/sink/pause", 15}, {"PUT", "/connectors/nope/stop", 15}, {"PUT", "/connectors/sink/resume", 7},
		{"POST", "/connectors/sink/restart?includeTasks=true&onlyFailed=true", 15}, {"POST", "/connectors/sink/tasks/1/restart", 47},
		{"GET", "/connectors/idle/tasks", 31}, {"GET", "/connectors/sink/tasks/01/status", 7}, {"GET", "/connectors?expand=info&expand=status", 7},
	} {
		f.Add(s.method, s.target, s.mode)
	}
	f.Fuzz(func(t *testing.T, method, target string, mode byte) {
		if !methodToken.MatchString(method) {
			return // net/http answers 400 itself
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return // net/http answers 400 itself
		}
		req := httptest.NewRequest("GET", "/", nil)
		req.Method, req.URL, req.RequestURI = method, u, target
		req.Host = "10.0.0.1:9750" // the agent's address (httptest's example.com is answered 421)
		rec := httptest.NewRecorder()
		opts := Options{Listen: "10.0.0.1:9750", Version: "v", Commit: "c", Cluster: "soak"}
		if mode&8 != 0 {
			opts.Listen = "127.0.0.1:9750"
		}
		Handler(fakeBackend{mode: mode}, opts).ServeHTTP(rec, req)
		res := rec.Result()
		body := rec.Body.Bytes()
		if res.StatusCode == http.StatusNoContent || res.StatusCode == http.StatusAccepted && len(body) == 0 {
			if len(body) > 0 {
				t.Fatalf("%s %s: 204 with a body:\n%s", method, target, body)
			}
			return // Connect answers pause, resume, stop and restarts with no body
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s %s: %d with Content-Type %q, not JSON:\n%s", method, target, res.StatusCode, ct, body)
		}
		if !json.Valid(body) {
			t.Fatalf("%s %s: %d with a body that is not JSON:\n%s", method, target, res.StatusCode, body)
		}
		if res.StatusCode >= 400 && (method == http.MethodGet || method == http.MethodHead) && u.Path == "/health" {
			var ws WorkerStatus
			if err := json.Unmarshal(body, &ws); err != nil || ws.Status == "" || ws.Message == "" {
				t.Fatalf("GET /health: %d with body %s (%v), want {\"status\": ..., \"message\": ...}", res.StatusCode, body, err)
			}
		} else if res.StatusCode >= 400 {
			var e Error
			if err := json.Unmarshal(body, &e); err != nil || e.Code != res.StatusCode || e.Message == "" {
				t.Fatalf("%s %s: %d with error body %s (%v), want {\"error_code\": %d, \"message\": ...}", method, target, res.StatusCode, body, err, res.StatusCode)
			}
		}
		switch res.StatusCode {
		case http.StatusOK, http.StatusAccepted, http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound,
			http.StatusMethodNotAllowed, http.StatusMisdirectedRequest, http.StatusConflict, http.StatusInternalServerError, http.StatusServiceUnavailable:
		default:
			t.Fatalf("%s %s: status %d, want one the API documents:\n%s", method, target, res.StatusCode, body)
		}
	})
}

// PeerClient answers for peers as an agent without an API client config does:
// plain HTTP to their address, no credentials.
func (b fakeBackend) PeerClient(addr string) (*Client, error) {
	return NewClientFor(addr, spec.APIClient{}, false)
}
