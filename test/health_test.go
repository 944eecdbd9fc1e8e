package test

import (
	"encoding/json"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// getHealth is GET /health of the agent at addr: the status code and the
// WorkerStatus; 0 when the agent does not answer or the body is not one.
func getHealth(addr string) (int, map[string]string) {
	resp, err := http.Get("http://" + addr + "/health")
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var ws map[string]string
	if json.NewDecoder(resp.Body).Decode(&ws) != nil {
		return 0, nil
	}
	return resp.StatusCode, ws
}

// GET /health on the real agent answers as a Kafka Connect worker's does
// (KIP-1017): 503 "starting" while the agent cannot yet join (its store
// does not answer) and so has not reconciled, 200 "healthy" once the store
// is up, the agent joined and its first assignment's job was started.
// GET /connector-plugins is [] throughout.
func TestHealthStartingThenHealthy(t *testing.T) {
	e := newEnv(t)
	store := testutil.FreePort(t) // no etcd there yet
	e.write(e.header("1s") + `
[cluster]
endpoints = ["http://` + store + `"]

[static]
connectors = ["probe"]

[[connector]]
name = "probe"
  [connector.run]
  command = ["sleep", "infinity"]
`)
	e.launch()
	var ws map[string]string
	testutil.Eventually(t, 20*time.Second, "/health answers 503 starting", func() bool {
		var code int
		code, ws = getHealth(e.addr)
		return code == http.StatusServiceUnavailable
	})
	if ws["status"] != "starting" || ws["message"] != "Worker is still starting up." {
		t.Errorf("GET /health while joining = 503 %v, want status starting", ws)
	}
	if code := getJSONQuiet("http://"+e.addr+"/healthz", nil); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz while joining = %d, want 503", code)
	}
	var plugins []any
	if code := getJSONQuiet("http://"+e.addr+"/connector-plugins", &plugins); code != http.StatusOK || plugins == nil || len(plugins) != 0 {
		t.Errorf("GET /connector-plugins while joining = %d %v, want 200 []", code, plugins)
	}

	externalEtcdOn(t, store)
	testutil.Eventually(t, 60*time.Second, "/health answers 200 healthy", func() bool {
		var code int
		code, ws = getHealth(e.addr)
		return code == http.StatusOK
	})
	if ws["status"] != "healthy" || ws["message"] != "Worker has completed startup and is ready to handle requests." {
		t.Errorf("GET /health once reconciled = 200 %v, want status healthy", ws)
	}
	// Healthy means the first assignment's job was started: its process is
	// being forked (starting) or runs.
	if j, ok := e.jobs()["probe"]; !ok || j.StartedAt == nil || (j.State != "starting" && j.State != "running") {
		t.Errorf("/health is healthy but job probe has not started: %+v", j)
	}
	e.waitRunning("probe")
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Errorf("SIGTERM: %v\n%s", err, e.out)
	}
}
