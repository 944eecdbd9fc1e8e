package worker

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// While the agent fences, each job's end is one "job killed by fencing"
// line whatever order the worker's steps ran in: its exit before the Stop
// (BackingOff, then Stopped) or the Stop before its exit (Stopping, then
// Stopped with the exit); never a crash to restart. Outside fencing a stop
// is not logged as a kill.
func TestFencingKillLoggedOnceInEitherOrder(t *testing.T) {
	killed := &Exit{Time: time.Now(), Code: -1, Signal: "SIGKILL", Reason: "killed by SIGKILL"}
	for _, c := range []struct {
		name     string
		fencing  bool
		states   []Status
		want     int
		notWants []string
	}{
		{"exit then stop", true, []Status{
			{State: Running, PID: 10},
			{State: BackingOff, LastExit: killed},
			{State: Stopped, LastExit: killed},
		}, 1, []string{"restarting"}},
		{"stop then exit", true, []Status{
			{State: Running, PID: 10},
			{State: Stopping, PID: 10},
			{State: Stopped, LastExit: killed},
		}, 1, []string{"restarting"}},
		{"exit with restart never", true, []Status{
			{State: Running, PID: 10},
			{State: Exited, LastExit: killed},
		}, 1, []string{"job failed"}},
		{"an ordinary stop", false, []Status{
			{State: Running, PID: 10},
			{State: Stopping, PID: 10},
			{State: Stopped, LastExit: killed},
		}, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			on := LogTransitions(slog.New(slog.NewTextHandler(&buf, nil)), "j", func() bool { return c.fencing })
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
