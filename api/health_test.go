package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// serve answers one GET of target over a fake agent in mode (fakeBackend).
func serve(t *testing.T, mode byte, target string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest("GET", target, nil)
	req.Host = "127.0.0.1:9750"
	rec := httptest.NewRecorder()
	Handler(fakeBackend{mode: mode}, Options{Listen: "127.0.0.1:9750"}).ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q, want application/json", target, ct)
	}
	return rec.Code, rec.Body.Bytes()
}

// GET /health answers as a Kafka Connect worker does (KIP-1017): 503
// "starting" before the first reconcile, whatever the loop's state; 200
// "healthy" after it; 500 "unhealthy" when the loop is stuck past its
// bound; each with Connect's message.
func TestHealthAsConnect(t *testing.T) {
	for _, c := range []struct {
		name    string
		mode    byte
		code    int
		status  string
		message string
	}{
		{"joining", 0, 503, "starting", "Worker is still starting up."},
		{"member, first reconcile running", 2, 503, "starting", "Worker is still starting up."},
		{"starting with a stuck loop", 2 | 64, 503, "starting", "Worker is still starting up."},
		{"reconciled", 1 | 2, 200, "healthy", "Worker has completed startup and is ready to handle requests."},
		{"reconciled, loop stuck", 1 | 2 | 64, 500, "unhealthy", "Worker was unable to handle this request and may be unable to handle other requests."},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := serve(t, c.mode, "/health")
			var ws map[string]string
			if err := json.Unmarshal(body, &ws); err != nil {
				t.Fatalf("GET /health: %d %s: %v", code, body, err)
			}
			if code != c.code || len(ws) != 2 || ws["status"] != c.status || ws["message"] != c.message {
				t.Errorf("GET /health = %d %v, want %d {status: %q, message: %q}", code, ws, c.code, c.status, c.message)
			}
		})
	}
}

// GET /connector-plugins is an empty list (a berth agent has no plugins),
// in every state, with or without Connect's connectorsOnly parameter.
func TestConnectorPluginsEmpty(t *testing.T) {
	for _, target := range []string{"/connector-plugins", "/connector-plugins?connectorsOnly=false"} {
		for _, mode := range []byte{0, 3} {
			code, body := serve(t, mode, target)
			var plugins []json.RawMessage
			if err := json.Unmarshal(body, &plugins); code != http.StatusOK || err != nil || plugins == nil || len(plugins) != 0 {
				t.Errorf("GET %s (mode %d) = %d %s, want 200 []", target, mode, code, body)
			}
		}
	}
}
