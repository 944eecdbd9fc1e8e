package test

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAgentStop measures a clean stop of the real agent with three
// running jobs: SIGTERM to the exit status in the parent's wait(2) (ns/op),
// and, as exit-after-stopped-ms, from the "agent stopped" log line (every
// job gone, every cgroup removed, the store closed) to that exit status.
// The agent is started outside the timer. anchor-sleep-exit-ms is the
// same SIGTERM-to-reaped-exit of a plain sleep(1) in the same run. The parent reaps at once
// (exec.Cmd.Wait): a parent that does not (an agent left to an init that
// reaps late) sees the process as a zombie for longer, which is not the
// agent's time.
func BenchmarkAgentStop(b *testing.B) {
	e := newEnv(b)
	e.write(e.header("2s") + `
[static]

[[connector]]
name = "s"
tasks = 3
  [connector.task]
  command = ["sleep", "infinity"]
`)
	var afterStopped, anchor time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// The anchor, measured in the same run: SIGTERM to the reaped exit
		// of a plain sleep(1).
		sl := exec.Command("sleep", "infinity")
		if err := sl.Start(); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		_ = sl.Process.Signal(syscall.SIGTERM)
		_ = sl.Wait()
		anchor += time.Since(t0)
		e.start()
		e.waitRunning("s-0", "s-1", "s-2")
		b.StartTimer()
		if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		err := <-e.waited
		exited := time.Now()
		b.StopTimer()
		if err != nil {
			b.Fatalf("agent exit: %v\n%s", err, e.out)
		}
		out := e.out.String()
		i := strings.Index(out, `msg="agent stopped"`)
		if i < 0 {
			b.Fatalf("no \"agent stopped\" line:\n%s", out)
		}
		stamp := out[strings.LastIndex(out[:i], "time=")+len("time=") : i-1]
		at, perr := time.Parse(time.RFC3339Nano, strings.Fields(stamp)[0])
		if perr != nil {
			b.Fatalf("parse %q: %v", stamp, perr)
		}
		afterStopped += exited.Sub(at)
	}
	b.ReportMetric(float64(afterStopped.Microseconds())/1000/float64(b.N), "exit-after-stopped-ms")
	b.ReportMetric(float64(anchor.Microseconds())/1000/float64(b.N), "anchor-sleep-exit-ms")
}
