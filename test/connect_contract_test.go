package test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// Kafka Connect's REST contract, on the real agent: the paths, shapes,
// state names and status codes of Connect's REST reference and of KIP-52
// (pause, resume: 202), KIP-745 (restart: 204 for the connector alone, 202
// with the status otherwise) and KIP-875 (stop: 204; STOPPED, no tasks).
// Every error is {"error_code": N, "message": "..."}.

// connectStates are the states Connect reports (AbstractStatus.State).
var connectStates = []string{"UNASSIGNED", "RUNNING", "PAUSED", "STOPPED", "RESTARTING", "FAILED"}

// call sends method path to the agent and returns the status, body and
// headers.
func (e *env) call(method, path string) (int, []byte, http.Header) {
	e.t.Helper()
	req, err := http.NewRequest(method, "http://"+e.addr+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := api.NewClient(e.addr).HTTP.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// expect checks the status of method path and decodes a JSON body into v
// (nil: the body must be empty).
func (e *env) expect(method, path string, code int, v any) {
	e.t.Helper()
	got, body, hdr := e.call(method, path)
	if got != code {
		e.t.Errorf("%s %s = %d, want %d: %s", method, path, got, code, body)
		return
	}
	if v == nil {
		if len(strings.TrimSpace(string(body))) != 0 {
			e.t.Errorf("%s %s: body %q, want none", method, path, body)
		}
		return
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		e.t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	if err := json.Unmarshal(body, v); err != nil {
		e.t.Errorf("%s %s: decode %q: %v", method, path, body, err)
	}
}

// expectError checks that method path answers code with a Connect error
// body naming that code.
func (e *env) expectError(method, path string, code int) http.Header {
	e.t.Helper()
	var er map[string]any
	got, body, hdr := e.call(method, path)
	if got != code {
		e.t.Errorf("%s %s = %d, want %d: %s", method, path, got, code, body)
		return hdr
	}
	if err := json.Unmarshal(body, &er); err != nil {
		e.t.Errorf("%s %s: error body %q is not JSON: %v", method, path, body, err)
		return hdr
	}
	if n, _ := er["error_code"].(float64); int(n) != code || er["message"] == "" || len(er) != 2 {
		e.t.Errorf("%s %s: error body %s, want exactly error_code %d and a message", method, path, body, code)
	}
	return hdr
}

// keys returns the sorted keys of a JSON object.
func keys(m map[string]json.RawMessage) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

type ctStatus struct {
	Name      string `json:"name"`
	Connector struct {
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
	} `json:"connector"`
	Tasks []struct {
		ID       int    `json:"id"`
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
	} `json:"tasks"`
	Type string `json:"type"`
}

// states lists the connector's and its tasks' states, each checked to be
// one of Connect's.
func (s ctStatus) states(t testing.TB) []string {
	t.Helper()
	out := []string{s.Connector.State}
	for _, k := range s.Tasks {
		out = append(out, k.State)
	}
	for _, st := range out {
		if !slices.Contains(connectStates, st) {
			t.Errorf("state %q is not one of Connect's %v", st, connectStates)
		}
	}
	return out
}

func (e *env) connectStatus(name string) ctStatus {
	e.t.Helper()
	var s ctStatus
	e.expect("GET", "/connectors/"+name+"/status", 200, &s)
	return s
}

// waitConnect waits until every state of name's status is want.
func (e *env) waitConnect(name, want string, tasks int) ctStatus {
	e.t.Helper()
	var s ctStatus
	testutil.Eventually(e.t, 20*time.Second, name+" "+want, func() bool {
		s = e.connectStatus(name)
		if len(s.Tasks) != tasks {
			return false
		}
		for _, st := range s.states(e.t) {
			if st != want {
				return false
			}
		}
		return true
	})
	return s
}

func TestConnectContract(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `
[cluster]
name = "contract"

[static]

[[connector]]
name = "a"
tasks = 2
  [connector.run]
  command = ["sleep", "infinity"]
  [connector.task]
  command = ["sleep", "infinity"]

[[connector]]
name = "t"
tasks = 1
  [connector.task]
  command = ["sleep", "infinity"]
`)
	e.start()
	e.waitRunning("a", "a-0", "a-1", "t-0")

	// GET /: version, commit, kafka_cluster_id.
	var root map[string]json.RawMessage
	e.expect("GET", "/", 200, &root)
	if keys(root) != "commit,kafka_cluster_id,version" || string(root["kafka_cluster_id"]) != `"contract"` {
		t.Errorf("GET / = %v", root)
	}

	// Lists and expansions.
	var names []string
	e.expect("GET", "/connectors", 200, &names)
	if strings.Join(names, ",") != "a,t" {
		t.Errorf("GET /connectors = %v", names)
	}
	var exp map[string]map[string]json.RawMessage
	e.expect("GET", "/connectors?expand=status", 200, &exp)
	if len(exp) != 2 || keys(exp["a"]) != "status" {
		t.Errorf("expand=status = %v", exp)
	}
	var es ctStatus
	if err := json.Unmarshal(exp["a"]["status"], &es); err != nil || es.Name != "a" || es.Connector.State != "RUNNING" || len(es.Tasks) != 2 {
		t.Errorf("expand=status a = %s (%v)", exp["a"]["status"], err)
	}
	e.expect("GET", "/connectors?expand=info", 200, &exp)
	if keys(exp["t"]) != "info" {
		t.Errorf("expand=info = %v", exp)
	}
	e.expect("GET", "/connectors?expand=status&expand=info", 200, &exp)
	if keys(exp["a"]) != "info,status" {
		t.Errorf("expand=status&expand=info = %v", exp)
	}

	// One connector: info, config, status, tasks, a task's status.
	var info map[string]json.RawMessage
	e.expect("GET", "/connectors/a", 200, &info)
	if keys(info) != "config,name,tasks,type" || string(info["tasks"]) != `[{"connector":"a","task":0},{"connector":"a","task":1}]` &&
		strings.Join(strings.Fields(string(info["tasks"])), "") != `[{"connector":"a","task":0},{"connector":"a","task":1}]` {
		t.Errorf("GET /connectors/a = %v", info)
	}
	var cfg map[string]string
	e.expect("GET", "/connectors/a/config", 200, &cfg)
	if cfg["name"] != "a" || cfg["tasks.max"] != "2" || cfg["task.command"] == "" {
		t.Errorf("GET /connectors/a/config = %v", cfg)
	}
	st := e.connectStatus("a")
	st.states(t)
	if st.Name != "a" || st.Connector.State != "RUNNING" || st.Connector.WorkerID != "e2e" || len(st.Tasks) != 2 || st.Tasks[1].ID != 1 {
		t.Errorf("GET /connectors/a/status = %+v", st)
	}
	if ts := e.connectStatus("t"); ts.Connector.State != "RUNNING" || ts.Connector.WorkerID == "" || len(ts.Tasks) != 1 {
		t.Errorf("a task-only connector's status has no connector object: %+v", ts)
	}
	var tasks []struct {
		ID struct {
			Connector string `json:"connector"`
			Task      int    `json:"task"`
		} `json:"id"`
		Config map[string]string `json:"config"`
	}
	e.expect("GET", "/connectors/a/tasks", 200, &tasks)
	if len(tasks) != 2 || tasks[1].ID.Connector != "a" || tasks[1].ID.Task != 1 || tasks[1].Config["task.command"] == "" {
		t.Errorf("GET /connectors/a/tasks = %+v", tasks)
	}
	// Connect's fields, and berth's fencing_token beside them (a field
	// Connect's clients skip, as they skip Connect's own "version").
	var ts map[string]json.RawMessage
	e.expect("GET", "/connectors/a/tasks/1/status", 200, &ts)
	if keys(ts) != "fencing_token,id,state,worker_id" || string(ts["id"]) != "1" || string(ts["fencing_token"]) == "0" {
		t.Errorf("GET /connectors/a/tasks/1/status = %v", ts)
	}

	// Errors: JSON everywhere, 404 for what does not exist, 405 for a
	// method the path does not take.
	e.expectError("GET", "/connectors/nope", 404)
	e.expectError("GET", "/connectors/nope/status", 404)
	e.expectError("GET", "/connectors/a/tasks/2/status", 404)
	e.expectError("GET", "/connectors/a/tasks/x/status", 404)
	e.expectError("GET", "/no/such/path", 404)
	e.expectError("PUT", "/connectors/nope/pause", 404)
	e.expectError("POST", "/connectors/nope/restart", 404)
	e.expectError("POST", "/connectors/a/tasks/5/restart", 404)
	if hdr := e.expectError("DELETE", "/connectors/a", 405); !strings.Contains(hdr.Get("Allow"), "GET") {
		t.Errorf("405 without Allow: GET: %v", hdr)
	}
	e.expectError("POST", "/connectors", 405)
	e.expectError("GET", "/connectors/a/pause", 405)
	e.expectError("POST", "/connectors/a/restart?includeTasks=maybe", 400)

	// Pause and resume: 202, no body.
	e.expect("PUT", "/connectors/a/pause", 202, nil)
	e.waitConnect("a", "PAUSED", 2)
	e.expect("PUT", "/connectors/a/resume", 202, nil)
	e.waitConnect("a", "RUNNING", 2)

	// Restart the connector alone (KIP-745 default): 204; only its job.
	before := e.waitRunning("a", "a-0", "a-1")
	e.expect("POST", "/connectors/a/restart", 204, nil)
	testutil.Eventually(t, 20*time.Second, "a restarted", func() bool {
		j := e.jobs()["a"]
		return j.State == "running" && j.PID != before["a"].PID
	})
	if js := e.jobs(); js["a-0"].PID != before["a-0"].PID || js["a-1"].PID != before["a-1"].PID {
		t.Error("restart of the connector alone restarted its tasks")
	}
	e.waitConnect("a", "RUNNING", 2)

	// onlyFailed with nothing failed: 202 and nothing RESTARTING.
	var rs ctStatus
	e.expect("POST", "/connectors/a/restart?includeTasks=true&onlyFailed=true", 202, &rs)
	for _, s := range rs.states(t) {
		if s != "RUNNING" {
			t.Errorf("onlyFailed with nothing failed: %+v", rs)
		}
	}
	// includeTasks: 202 with every job RESTARTING.
	e.expect("POST", "/connectors/a/restart?includeTasks=true", 202, &rs)
	for _, s := range rs.states(t) {
		if s != "RESTARTING" {
			t.Errorf("includeTasks: %+v, want every job RESTARTING", rs)
		}
	}
	e.waitConnect("a", "RUNNING", 2)
	e.expect("POST", "/connectors/a/tasks/0/restart", 204, nil)

	// Stop (KIP-875): 204; STOPPED, no tasks; resume brings them back.
	e.expect("PUT", "/connectors/a/stop", 204, nil)
	e.waitConnect("a", "STOPPED", 0)
	e.expect("GET", "/connectors/a/tasks", 200, &tasks)
	if len(tasks) != 0 {
		t.Errorf("a stopped connector lists tasks %+v", tasks)
	}
	e.expectError("GET", "/connectors/a/tasks/0/status", 404)
	e.expect("PUT", "/connectors/a/resume", 202, nil)
	e.waitConnect("a", "RUNNING", 2)
}

// An agent listening on a non-loopback address refuses every write that
// its listener did not authenticate with 403 (and still answers reads);
// without a web configuration none is (TestWritesAuthenticatedOffLoopback
// has one).
func TestConnectWritesRefusedOffLoopback(t *testing.T) {
	e := newEnv(t)
	e.addr = "0.0.0.0" + e.addr[strings.LastIndexByte(e.addr, ':'):]
	e.write(e.header("1s") + `
[static]

[[connector]]
name = "a"
  [connector.run]
  command = ["sleep", "infinity"]
`)
	e.start()
	e.waitRunning("a")
	e.expectError("PUT", "/connectors/a/pause", 403)
	e.expectError("PUT", "/connectors/a/stop", 403)
	e.expectError("POST", "/connectors/a/restart", 403)
	e.expectError("POST", "/connectors/a/restart?includeTasks=true", 403)
	var st ctStatus
	e.expect("GET", "/connectors/a/status", 200, &st)
	if j := e.jobs()["a"]; j.State != "running" {
		t.Errorf("a refused write changed the job: %s", j.State)
	}
}
