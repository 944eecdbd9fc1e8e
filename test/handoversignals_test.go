package test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// handOverLine is what the agent logs just before its exec.
const handOverLine = "handing the jobs over to the program installed"

// C35: signals in the upgrade's re-exec window. SIGUSR2, then SIGHUP
// every 0.5 ms until the new image is ready; or a second SIGUSR2 2 ms
// after the hand-over line: the agent survives every signal (queued, or
// applied once the new image runs), keeps its pid and hands every job
// over (same pids), and stops cleanly.
func TestC35SignalsInTheHandOverWindow(t *testing.T) {
	for _, tc := range []struct {
		name   string
		during func(t *testing.T, e *env, ready <-chan struct{})
	}{
		{"SIGHUP every 0.5 ms", func(t *testing.T, e *env, ready <-chan struct{}) {
			tick := time.NewTicker(500 * time.Microsecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-ready:
					t.Logf("%d SIGHUPs sent during the hand-over", n)
					return
				case <-tick.C:
					_ = e.cmd.Process.Signal(syscall.SIGHUP)
				}
			}
		}},
		{"a second SIGUSR2 2 ms after the hand-over line", func(t *testing.T, e *env, ready <-chan struct{}) {
			if !awaitLine(e, handOverLine, ready) {
				return
			}
			// The case's input: the second signal 2 ms after the line.
			<-time.After(2 * time.Millisecond)
			_ = e.cmd.Process.Signal(syscall.SIGUSR2)
		}},
		{"SIGUSR2 every 0.5 ms from the hand-over line", func(t *testing.T, e *env, ready <-chan struct{}) {
			if !awaitLine(e, handOverLine, ready) {
				return
			}
			tick := time.NewTicker(500 * time.Microsecond)
			defer tick.Stop()
			for {
				select {
				case <-ready:
					return
				case <-tick.C:
					_ = e.cmd.Process.Signal(syscall.SIGUSR2)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.write(e.header("2s") + `
[cluster]
session_ttl = "10s"

[static]
connectors = ["sleeper", "counter"]

[[connector]]
name = "sleeper"
  [connector.run]
  command = ["sleep", "1000"]

` + counterJob)
			e.start()
			before := e.waitRunning("sleeper", "counter")
			var ag0 api.Agent
			getJSON(t, "http://"+e.addr+"/v1/agent", &ag0)
			if err := e.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
				t.Fatal(err)
			}
			ready := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				tc.during(t, e, ready)
			}()
			// The new image: a member that has adopted the runs.
			var exited error
			ok := testutil.Poll(60*time.Second, func() bool {
				select {
				case err := <-e.waited:
					e.waited <- err
					exited = err
					return true
				default:
				}
				var ag api.Agent
				return tryAgent(e, &ag) && ag.ImageStarted.After(ag0.ImageStarted) && ag.State == "member" && ag.Adoption != nil
			})
			close(ready)
			<-done
			if exited != nil || e.cmd.ProcessState != nil {
				t.Fatalf("the agent exited during the hand-over: %v", exited)
			}
			if !ok {
				t.Fatal("no new image ready within 60 s")
			}
			// What was queued (a reload, a second hand-over) runs, and
			// the agent still runs after it.
			testutil.Eventually(t, 60*time.Second, "the agent's last image ready with no hand-over queued", func() bool {
				return settled(e.out.String())
			})
			select {
			case err := <-e.waited:
				t.Fatalf("the agent exited: %v", err)
			default:
			}
			var ag api.Agent
			getJSON(t, "http://"+e.addr+"/v1/agent", &ag)
			if ag.PID != ag0.PID {
				t.Errorf("agent pid %d, %d before", ag.PID, ag0.PID)
			}
			after := e.waitRunning("sleeper", "counter")
			for id, b := range before {
				if after[id].PID != b.PID {
					t.Errorf("%s: pid %d after the hand-over, %d before: a job was lost", id, after[id].PID, b.PID)
				}
			}
			if err := e.stop(syscall.SIGTERM); err != nil {
				t.Fatalf("clean stop: %v", err)
			}
		})
	}
}

// awaitLine returns once the agent's output holds line, looking every
// 0.1 ms (the signal that follows is timed from it); false when ready
// is closed first.
func awaitLine(e *env, line string, ready <-chan struct{}) bool {
	tick := time.NewTicker(100 * time.Microsecond)
	defer tick.Stop()
	for !strings.Contains(e.out.String(), line) {
		select {
		case <-ready:
			return false
		case <-tick.C:
		}
	}
	return true
}

// tryAgent reads GET /v1/agent into ag; false while the agent does not
// answer (between images).
func tryAgent(e *env, ag *api.Agent) bool {
	return api.NewClient("http://"+e.addr).Get(context.Background(), "/v1/agent", ag) == nil
}

// settled reports from the agent's output whether its last image is
// ready and owes no hand-over: a hand-over it queued before it was ready
// runs once it is (another image follows, or it is refused).
func settled(out string) bool {
	images := strings.Split(out, `msg="agent starting"`)
	last := images[len(images)-1]
	i := strings.Index(last, "agent ready")
	if len(images) < 3 || i < 0 || strings.Contains(last, handOverLine) {
		return false
	}
	return !strings.Contains(last, "hand-over queued") || strings.Contains(last[i:], "the agent goes on as before")
}
