package test

import (
	"os"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// A job of two busy loops held to 0.05 cores stalls on CPU: the agent's
// berth_job_pressure_cpu_waiting_seconds_total for it moves, and its
// pressure counters never go down. An idle job beside it stays near zero.
func TestPressureMetricsUnderCPUQuota(t *testing.T) {
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		t.Skipf("the kernel keeps no PSI (%v): needs CONFIG_PSI and psi=1", err)
	}
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["stall", "idle"]

[[connector]]
name = "stall"
  [connector.run]
  command = ["/bin/sh", "-c", "while :; do :; done & while :; do :; done"]
  limits = { cpu = 0.05 }

[[connector]]
name = "idle"
  [connector.run]
  command = ["/bin/sh", "-c", "exec sleep infinity"]
`)
	e.start()
	e.waitRunning("stall", "idle")
	last := map[string]float64{}
	var stall float64
	testutil.Eventually(t, 30*time.Second, "cpu waiting of the stalled job to pass 1 s", func() bool {
		m := e.metrics()
		for _, name := range pressureMetrics {
			for _, job := range []string{"stall", "idle"} {
				v, ok := metric(m, name, `job_id="`+job+`"`)
				if !ok {
					t.Fatalf("%s for job %s missing", name, job)
				}
				key := name + " " + job
				if v < last[key] {
					t.Fatalf("%s went down: %v -> %v", key, last[key], v)
				}
				last[key] = v
			}
		}
		stall, _ = metric(m, "berth_job_pressure_cpu_waiting_seconds_total", `job_id="stall"`)
		return stall >= 1
	})
	if idle := last["berth_job_pressure_cpu_waiting_seconds_total idle"]; idle >= stall/2 {
		t.Errorf("idle job waited %v s for CPU, the stalled one %v s", idle, stall)
	}
}
