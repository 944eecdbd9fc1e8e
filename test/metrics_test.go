package test

import (
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// C12 (node_exporter#1042): a job whose processes exit all the time; 100
// scrapes all succeed and no counter of that job ever decreases.
func TestCountersNeverDecrease(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["churn"]

[[connector]]
name = "churn"
  [connector.run]
  command = ["/bin/sh", "-c", "while :; do /bin/true; done"]
  limits = { cpu = 0.5 }
`)
	e.start()
	e.waitRunning("churn")
	last := map[string]float64{}
	for i := 0; i < 100; i++ {
		m := e.metrics()
		if v, ok := metric(m, "berth_scrape_collector_success", `collector="procfs"`); !ok || v != 1 {
			t.Fatalf("scrape %d: procfs collector success = %v (present %v)", i, v, ok)
		}
		if v, ok := metric(m, "berth_scrape_collector_success", `collector="cgroup"`); !ok || v != 1 {
			t.Fatalf("scrape %d: cgroup collector success = %v (present %v)", i, v, ok)
		}
		n := 0
		for k, v := range m {
			if !strings.Contains(k, `job_id="churn"`) || !strings.Contains(k, "_total{") {
				continue
			}
			n++
			if prev, ok := last[k]; ok && v < prev {
				t.Fatalf("scrape %d: counter %s went down: %v -> %v", i, k, prev, v)
			}
			last[k] = v
		}
		if n < 6 {
			t.Fatalf("scrape %d: only %d counters for the job", i, n)
		}
	}
	if v := last[`berth_job_context_switches_total{connector="churn",group="",job_id="churn",kind="connector",type="voluntary"}`]; v == 0 {
		t.Errorf("context switches of exited processes not counted: %v", last)
	}
}

// The example's burner: a busy loop held to 0.5 cores, measured from the
// agent's own CPU counter over a window of kernel accounting, beside an
// unlimited busy loop in the same window: the anchor says how much CPU the
// host could give at all (a shared, saturated host may give less than the
// quota, and then the quota is never reached).
func TestCPULimitVisibleInMetrics(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["burner", "free"]

[[connector]]
name = "burner"
  [connector.run]
  command = ["/bin/sh", "-c", "while :; do :; done"]
  limits = { cpu = 0.5 }

[[connector]]
name = "free"
  [connector.run]
  command = ["/bin/sh", "-c", "while :; do :; done"]
`)
	e.start()
	e.waitRunning("burner", "free")
	cpu := func(m map[string]float64, job string) float64 {
		u, ok1 := metric(m, "berth_job_cpu_seconds_total", `job_id="`+job+`",kind="connector",mode="user"`)
		s, ok2 := metric(m, "berth_job_cpu_seconds_total", `job_id="`+job+`",kind="connector",mode="system"`)
		if !ok1 || !ok2 {
			t.Fatalf("no berth_job_cpu_seconds_total for %s", job)
		}
		return u + s
	}
	m0, t0 := e.metrics(), time.Now()
	testutil.Eventually(t, 10*time.Second, "3 s of accounting", func() bool { return time.Since(t0) >= 3*time.Second })
	m1, t1 := e.metrics(), time.Now()
	window := t1.Sub(t0).Seconds()
	rate := (cpu(m1, "burner") - cpu(m0, "burner")) / window
	free := (cpu(m1, "free") - cpu(m0, "free")) / window
	t.Logf("burner used %.3f cores; the unlimited anchor %.3f", rate, free)
	// The quota is an upper bound; USER_HZ tick accounting on v1 is coarse.
	if rate > 0.55 {
		t.Errorf("burner used %.3f cores, limit 0.5", rate)
	}
	// Well below what the host gave the anchor (or the quota) only if the
	// counter is read wrong.
	if want := min(0.5, free); rate < 0.6*want {
		t.Errorf("burner used %.3f cores while the unlimited anchor got %.3f: is the CPU counter read right?", rate, free)
	}
	m := e.metrics()
	if v, ok := metric(m, "berth_job_cpu_limit_cores", `job_id="burner"`); !ok || v != 0.5 {
		t.Errorf("berth_job_cpu_limit_cores = %v (present %v), want 0.5", v, ok)
	}
	v, ok := metric(m, "berth_job_cpu_throttled_periods_total", `job_id="burner"`)
	switch {
	case !ok:
		t.Error("berth_job_cpu_throttled_periods_total of the burner not exported")
	case free >= 0.7 && v == 0:
		t.Errorf("burner never throttled although the host gave the anchor %.3f cores", free)
	case free < 0.7:
		t.Logf("host saturated (the anchor got %.3f cores): the quota may not be reached, throttling not checked (throttled periods: %v)", free, v)
	}
}

// C5 (containerd #6323) end to end: a balloon in 32 MiB, restart always:
// every OOM kill is counted, the job restarts, and the last exit says OOM.
func TestOOMKillsCountedAndRestarted(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[static]
connectors = ["balloon"]

[[connector]]
name = "balloon"
  [connector.run]
  command = ["/usr/bin/tail", "/dev/zero"]
  restart = "always"
  limits = { memory = "32MiB" }
`)
	e.start()
	testutil.Eventually(t, 30*time.Second, "two OOM kills and a restart", func() bool {
		m := e.metrics()
		oom, _ := metric(m, "berth_job_oom_kills_total", `job_id="balloon"`)
		restarts, _ := metric(m, "berth_job_restarts_total", `job_id="balloon"`)
		return oom >= 2 && restarts >= 1
	})
	j := e.jobs()["balloon"]
	if j.LastExit == nil || !j.LastExit.OOMKilled {
		t.Errorf("last exit does not say OOM-killed: %+v", j.LastExit)
	}
	m := e.metrics()
	if v, ok := metric(m, "berth_job_memory_limit_bytes", `job_id="balloon"`); !ok || v != 32<<20 {
		t.Errorf("berth_job_memory_limit_bytes = %v, want %d", v, 32<<20)
	}
}
