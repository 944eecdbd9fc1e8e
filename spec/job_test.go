package spec

import (
	"slices"
	"testing"
	"time"
)

// Jobs expands each connector into its own job and its tasks, sorted by ID,
// with ${...} references expanded per job and the default stop timeout
// where a process sets none; Env adds the BERTH_* variables, which a
// process's env cannot override.
func TestJobsAndEnv(t *testing.T) {
	w := &Workload{Connectors: []Connector{{
		Name: "orders", Tasks: 2, Group: "g",
		Run:  &Process{Command: []string{"run", "${BERTH_JOB_ID}"}, StopTimeout: time.Second},
		Task: &Process{Command: []string{"task", "--n=${BERTH_TASK}"}, Env: map[string]string{"A": "1", EnvJobID: "x"}},
	}}}
	jobs := w.Jobs(5 * time.Second)
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	if want := []string{"orders", "orders-0", "orders-1"}; !slices.Equal(ids, want) {
		t.Fatalf("job IDs %v, want %v", ids, want)
	}
	own, task1 := jobs[0], jobs[2]
	if own.Kind != KindConnector || own.Task != -1 || own.Process.StopTimeout != time.Second ||
		!slices.Equal(own.Process.Command, []string{"run", "orders"}) {
		t.Errorf("connector job %+v", own)
	}
	if task1.Kind != KindTask || task1.Task != 1 || task1.Group != "g" || task1.Process.StopTimeout != 5*time.Second ||
		!slices.Equal(task1.Process.Command, []string{"task", "--n=1"}) {
		t.Errorf("task job %+v", task1)
	}
	if w.Connectors[0].Task.Command[1] != "--n=${BERTH_TASK}" {
		t.Errorf("the definition's command was changed: %v", w.Connectors[0].Task.Command)
	}
	want := []string{"A=1", "BERTH_CGROUP=/berth/jobs/orders-1", "BERTH_CONNECTOR=orders", "BERTH_JOB_ID=orders-1", "BERTH_TASK=1"}
	if env := task1.Env("/berth/jobs/orders-1"); !slices.Equal(env, want) {
		t.Errorf("Env = %v, want %v", env, want)
	}
	if TaskID("orders", 7) != "orders-7" {
		t.Errorf("TaskID = %q", TaskID("orders", 7))
	}
}
