package test

import (
	"net/http"
	"testing"
)

// The Kafka Connect-shaped views and the job API answer as documented.
func TestConnectAPI(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `
[static]

[[connector]]
name = "sink"
tasks = 2
  [connector.run]
  command = ["sleep", "infinity"]
  [connector.task]
  command = ["sleep", "infinity"]
  limits = { memory = "32MiB" }
`)
	e.start()
	e.waitRunning("sink", "sink-0", "sink-1")
	base := "http://" + e.addr
	var names []string
	if code := getJSON(t, base+"/connectors", &names); code != http.StatusOK || len(names) != 1 || names[0] != "sink" {
		t.Fatalf("GET /connectors = %d %v", code, names)
	}
	var info struct {
		Name   string            `json:"name"`
		Config map[string]string `json:"config"`
		Tasks  []struct {
			Connector string `json:"connector"`
			Task      int    `json:"task"`
		} `json:"tasks"`
	}
	if code := getJSON(t, base+"/connectors/sink", &info); code != http.StatusOK {
		t.Fatalf("GET /connectors/sink = %d", code)
	}
	if info.Name != "sink" || len(info.Tasks) != 2 || info.Tasks[1].Task != 1 || info.Config["tasks.max"] != "2" ||
		info.Config["task.limits.memory"] != "33554432" {
		t.Errorf("GET /connectors/sink = %+v", info)
	}
	var status struct {
		Connector struct {
			State    string `json:"state"`
			WorkerID string `json:"worker_id"`
		} `json:"connector"`
		Tasks []struct {
			ID       int    `json:"id"`
			State    string `json:"state"`
			WorkerID string `json:"worker_id"`
		} `json:"tasks"`
	}
	if code := getJSON(t, base+"/connectors/sink/status", &status); code != http.StatusOK {
		t.Fatalf("GET /connectors/sink/status = %d", code)
	}
	if status.Connector.State != "RUNNING" || status.Connector.WorkerID != "e2e" || len(status.Tasks) != 2 ||
		status.Tasks[0].State != "RUNNING" || status.Tasks[1].WorkerID != "e2e" {
		t.Errorf("GET /connectors/sink/status = %+v", status)
	}
	if code := getJSON(t, base+"/connectors/nope", nil); code != http.StatusNotFound {
		t.Errorf("GET /connectors/nope = %d, want 404", code)
	}
	var job struct {
		ID     string `json:"id"`
		State  string `json:"state"`
		PID    int    `json:"pid"`
		Limits struct {
			Memory int64 `json:"memory"`
		} `json:"limits"`
		Usage *struct {
			MemoryLimitBytes uint64 `json:"memory_limit_bytes"`
		} `json:"usage"`
	}
	if code := getJSON(t, base+"/v1/jobs/sink-1", &job); code != http.StatusOK || job.State != "running" || job.PID == 0 ||
		job.Limits.Memory != 32<<20 || job.Usage == nil || job.Usage.MemoryLimitBytes != 32<<20 {
		t.Errorf("GET /v1/jobs/sink-1 = %d %+v", code, job)
	}
	if code := getJSON(t, base+"/v1/jobs/nope", nil); code != http.StatusNotFound {
		t.Errorf("GET /v1/jobs/nope = %d, want 404", code)
	}
}
