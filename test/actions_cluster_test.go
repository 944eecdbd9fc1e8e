package test

import (
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// Operator actions in a two-agent cluster (balanced placement): a restart
// of one task is carried out by the agent that runs it and touches no other
// job on either agent; onlyFailed restarts only the FAILED task, wherever
// it runs; a pause holds on both agents, across an agent's restart and
// when jobs move to the other agent, and a resume runs everything again.

// placed is where each job runs and in what state, over agents.
type placed map[string]struct {
	agent string
	job   api.Job
}

// waitPlaced waits until every job of want is reported by exactly one
// agent in the state want gives it, and returns the placement.
func waitPlaced(t *testing.T, want map[string]string, agents ...*agent) placed {
	t.Helper()
	var p placed
	var last string
	deadline := time.Now().Add(testutil.Deadline(settle))
	for {
		if done := func() bool {
			p = placed{}
			seen := map[string]int{}
			for _, a := range agents {
				js, err := a.tryJobs()
				if err != nil {
					last = err.Error()
					return false
				}
				for id, j := range js {
					seen[id]++
					p[id] = struct {
						agent string
						job   api.Job
					}{a.id, j}
				}
			}
			var bad []string
			for id, st := range want {
				if seen[id] != 1 || string(p[id].job.State) != st || (st == "running" && p[id].job.PID == 0) {
					bad = append(bad, fmt.Sprintf("%s: %d agents, %s", id, seen[id], p[id].job.State))
				}
			}
			sort.Strings(bad)
			last = strings.Join(bad, "; ")
			return len(bad) == 0 && len(seen) == len(want)
		}(); done {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, jobs not in states %v: %s", testutil.Deadline(settle), want, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestActionsCluster(t *testing.T) {
	eps := embeddedEtcd(t)
	spec := clusterSpec{name: clusterName(), endpoints: eps, protocol: "balanced"}
	workload := sleeperConnector("p", 3) + `
[[connector]]
name = "q"
tasks = 2
  [connector.task]
  command = ["/bin/sh", "-c", "[ ${BERTH_TASK} = 0 ] && exec sleep infinity; echo q-1 gives up; exit 3"]
  restart = "never"
`
	x, y := newAgent(t, "x"), newAgent(t, "y")
	for _, a := range []*agent{x, y} {
		a.configure(spec, staticTable(nil, nil)+workload)
		a.start()
	}
	all := map[string]string{"p": "running", "p-0": "running", "p-1": "running", "p-2": "running", "q-0": "running", "q-1": "exited"}
	var first placed
	testutil.Eventually(t, settle, "jobs spread over both agents", func() bool {
		first = waitPlaced(t, all, x, y)
		n := map[string]int{}
		for _, pl := range first {
			n[pl.agent]++
		}
		return n["x"] > 0 && n["y"] > 0
	})

	// Restart one task of p that y runs, asked through x's store client.
	var task string
	for _, id := range []string{"p-0", "p-1", "p-2"} {
		if first[id].agent == "y" {
			task = id
		}
	}
	if task == "" {
		t.Fatalf("y runs no task of p: %v", first)
	}
	if out, err := exec.Command(berthBin, "restart", task, "--config", x.config).CombinedOutput(); err != nil {
		t.Fatalf("berth restart %s: %v\n%s", task, err, out)
	}
	second := waitPlaced(t, all, x, y)
	testutil.Eventually(t, settle, task+" restarted on y", func() bool {
		second = waitPlaced(t, all, x, y)
		return second[task].job.PID != first[task].job.PID
	})
	for id, pl := range first {
		if id != task && id != "q-1" && (second[id].job.PID != pl.job.PID || second[id].agent != pl.agent) {
			t.Errorf("restart of %s touched %s: %s/%d -> %s/%d", task, id, pl.agent, pl.job.PID, second[id].agent, second[id].job.PID)
		}
	}
	if !strings.Contains(y.out.String(), `msg="job restarted on request" job_id=`+task) {
		t.Errorf("y's log does not say it restarted %s", task)
	}
	if strings.Contains(x.out.String(), `msg="job restarted on request" job_id=`+task) {
		t.Errorf("x restarted %s, which y runs", task)
	}

	// onlyFailed through x's REST API: only q-1 (exited 3) runs again,
	// wherever it is; q-0 keeps its process.
	code, body, _ := x.call("POST", "/connectors/q/restart?includeTasks=true&onlyFailed=true")
	if code != 202 || !strings.Contains(string(body), `"RESTARTING"`) {
		t.Fatalf("POST /connectors/q/restart?includeTasks=true&onlyFailed=true = %d %s", code, body)
	}
	q1 := second["q-1"]
	owner := map[string]*agent{"x": x, "y": y}[q1.agent]
	testutil.Eventually(t, settle, "q-1 ran again", func() bool {
		n := strings.Count(owner.out.String(), `msg="job running" job_id=q-1 `)
		return n >= 2
	})
	third := waitPlaced(t, all, x, y)
	if third["q-0"].job.PID != second["q-0"].job.PID {
		t.Errorf("onlyFailed restarted the running q-0: %d -> %d", second["q-0"].job.PID, third["q-0"].job.PID)
	}

	// Pause p through x's API: every job of p stops on both agents.
	if code, body, _ := x.call("PUT", "/connectors/p/pause"); code != 202 {
		t.Fatalf("PUT /connectors/p/pause = %d %s", code, body)
	}
	pausedP := map[string]string{"p": "paused", "p-0": "paused", "p-1": "paused", "p-2": "paused", "q-0": "running", "q-1": "exited"}
	p1 := waitPlaced(t, pausedP, x, y)
	for id, pl := range third {
		if strings.HasPrefix(id, "p") && testutil.Alive(pl.job.PID) {
			t.Errorf("paused %s: process %d alive", id, pl.job.PID)
		}
	}
	var st ctStatus
	if err := getAPI(y.addr, "/connectors/p/status", &st); err != nil || st.Connector.State != "PAUSED" || len(st.Tasks) != 3 {
		t.Errorf("status of p through y = %+v, %v", st, err)
	}
	for _, k := range st.Tasks {
		if k.State != "PAUSED" {
			t.Errorf("task %d of paused p is %s", k.ID, k.State)
		}
	}

	// y restarts: its jobs move to x and stay paused there; back on y
	// after its restart, still paused. No job of p starts anywhere.
	if err := y.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("y stop: %v", err)
	}
	xLogBefore := len(x.out.String())
	waitPlaced(t, pausedP, x)
	y.start()
	waitPlaced(t, pausedP, x, y)
	testutil.Eventually(t, settle, "jobs back on y", func() bool {
		js, err := y.tryJobs()
		return err == nil && len(js) > 0
	})
	p2 := waitPlaced(t, pausedP, x, y)
	for _, log := range []string{x.out.String()[xLogBefore:], y.out.String()} {
		for _, id := range []string{"p", "p-0", "p-1", "p-2"} {
			if strings.Contains(log, `msg="job starting" job_id=`+id+" ") {
				t.Errorf("paused job %s started after a reassignment or restart", id)
			}
		}
	}
	t.Logf("paused placement before %v, after y's restart %v", agentsOf(p1), agentsOf(p2))

	// Resume through the CLI on y's store: everything runs again.
	if out, err := exec.Command(berthBin, "resume", "p", "--config", y.config).CombinedOutput(); err != nil {
		t.Fatalf("berth resume p: %v\n%s", err, out)
	}
	waitPlaced(t, all, x, y)
}

func agentsOf(p placed) map[string]string {
	out := map[string]string{}
	for id, pl := range p {
		out[id] = pl.agent
	}
	return out
}
