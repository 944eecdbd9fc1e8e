package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/worker"
)

// fakeBackend is an agent as the handler sees it, in one of the states
// the bits of mode select: ready or starting, a member or joining, its
// members readable or not.
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

func (b fakeBackend) Members(context.Context) ([]Member, error) {
	if b.mode&4 == 0 {
		return nil, errors.New("store unreachable")
	}
	return []Member{{ID: "a", Protocol: "static", Connectors: []string{"sink"}, Tasks: []string{"sink-0", "sink-1"}}}, nil
}

func (b fakeBackend) Assignment() (Assignment, bool) {
	if b.mode&2 == 0 {
		return Assignment{}, false
	}
	return Assignment{Generation: 7, Leader: "a", Members: map[string][]string{"a": {"sink", "sink-0"}},
		Unassigned: map[string]string{"sink-1": "declared by absent member b; no standby"}, Conflicts: []Conflict{}}, true
}

func (b fakeBackend) Workload() *config.Workload {
	return &config.Workload{Connectors: []config.Connector{
		{Name: "sink", Tasks: 2, Run: &config.Process{Command: []string{"/bin/sleep", "1"}, Restart: config.RestartAlways,
			Env: map[string]string{"URL": "http://x"}}, Task: &config.Process{Command: []string{"x"}, Restart: config.RestartOnFailure}},
		{Name: "idle", Tasks: 0},
	}}
}

func (b fakeBackend) Owners() (string, map[string]string) {
	return "a", map[string]string{"sink": "a", "sink-0": "a", "sink-1": "b"}
}

// methodToken is what net/http's server lets through to a handler as a
// method; other requests are answered 400 before any handler runs.
var methodToken = regexp.MustCompile(`^[A-Za-z]{1,16}$`)

// FuzzHandler serves random methods, paths and queries (any request the
// HTTP server would hand to a handler) over a fake agent in every state:
// the handler never panics, every answer is JSON (Content-Type
// application/json, a body that parses), and an error answer is Connect's
// {"error_code", "message"} with error_code equal to the status.
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
		{"DELETE", "/connectors/sink", 7}, {"GET", "/v1//jobs", 7}, {"GET", "/v1/jobs/%2e%2e/agent", 7},
		{"HEAD", "/metrics", 7}, {"GET", "*", 7},
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
		rec := httptest.NewRecorder()
		Handler(fakeBackend{mode: mode}, nil).ServeHTTP(rec, req)
		res := rec.Result()
		body := rec.Body.Bytes()
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s %s: %d with Content-Type %q, not JSON:\n%s", method, target, res.StatusCode, ct, body)
		}
		if !json.Valid(body) {
			t.Fatalf("%s %s: %d with a body that is not JSON:\n%s", method, target, res.StatusCode, body)
		}
		if res.StatusCode >= 400 {
			var e Error
			if err := json.Unmarshal(body, &e); err != nil || e.Code != res.StatusCode || e.Message == "" {
				t.Fatalf("%s %s: %d with error body %s (%v), want {\"error_code\": %d, \"message\": ...}", method, target, res.StatusCode, body, err, res.StatusCode)
			}
		}
		if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s %s: status %d, want 200, 404 or 503:\n%s", method, target, res.StatusCode, body)
		}
	})
}
