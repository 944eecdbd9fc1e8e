package supervisor

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/worker"
)

// While the agent fences, each job's end is one "job killed by fencing"
// line whatever order the worker's steps ran in: its exit before the Stop
// (BackingOff, then Stopped) or the Stop before its exit (Stopping, then
// Stopped with the exit); never a crash to restart. Outside fencing a stop
// is not logged as a kill.
func TestFencingKillLoggedOnceInEitherOrder(t *testing.T) {
	killed := &worker.Exit{Time: time.Now(), Code: -1, Signal: "SIGKILL", Reason: "killed by SIGKILL"}
	for _, c := range []struct {
		name     string
		fencing  bool
		states   []worker.Status
		want     int
		notWants []string
	}{
		{"exit then stop", true, []worker.Status{
			{State: worker.Running, PID: 10},
			{State: worker.BackingOff, LastExit: killed},
			{State: worker.Stopped, LastExit: killed},
		}, 1, []string{"restarting"}},
		{"stop then exit", true, []worker.Status{
			{State: worker.Running, PID: 10},
			{State: worker.Stopping, PID: 10},
			{State: worker.Stopped, LastExit: killed},
		}, 1, []string{"restarting"}},
		{"exit with restart never", true, []worker.Status{
			{State: worker.Running, PID: 10},
			{State: worker.Exited, LastExit: killed},
		}, 1, []string{"job failed"}},
		{"an ordinary stop", false, []worker.Status{
			{State: worker.Running, PID: 10},
			{State: worker.Stopping, PID: 10},
			{State: worker.Stopped, LastExit: killed},
		}, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			e := &executor{log: slog.New(slog.NewTextHandler(&buf, nil))}
			e.fencing.Store(c.fencing)
			on := e.logTransitions("j")
			for _, st := range c.states {
				on(st)
			}
			if n := strings.Count(buf.String(), `msg="job killed by fencing" job_id=j exit="killed by SIGKILL"`); n != c.want {
				t.Errorf("%d kill lines, want %d; log:\n%s", n, c.want, buf.String())
			}
			for _, s := range c.notWants {
				if strings.Contains(buf.String(), s) {
					t.Errorf("log has %q:\n%s", s, buf.String())
				}
			}
		})
	}
}
