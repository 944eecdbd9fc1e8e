package test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

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
// agent's own CPU counter over a window of kernel accounting. The counter
// is checked against the process's own CPU time (/proc/<pid>/stat, read
// just before and just after each scrape, so the scrape's value lies
// between the two): that holds however busy the host is. An unlimited busy
// loop beside it says how much CPU the host could give at all (a shared,
// saturated host may give less than the quota, and then the quota is
// never reached nor throttled).
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
	pid := e.jobs()["burner"].PID
	proc, err := procfs.NewProc(pid)
	if err != nil {
		t.Fatalf("burner pid %d: %v", pid, err)
	}
	procCPU := func() float64 {
		st, err := proc.Stat()
		if err != nil {
			t.Fatalf("burner pid %d: %v", pid, err)
		}
		return st.CPUTime()
	}
	p0a := procCPU()
	m0, t0 := e.metrics(), time.Now()
	p0b := procCPU()
	testutil.Eventually(t, 10*time.Second, "3 s of accounting", func() bool { return time.Since(t0) >= 3*time.Second })
	p1a := procCPU()
	m1, t1 := e.metrics(), time.Now()
	p1b := procCPU()
	window := t1.Sub(t0).Seconds()
	used := cpu(m1, "burner") - cpu(m0, "burner")
	rate := used / window
	free := (cpu(m1, "free") - cpu(m0, "free")) / window
	t.Logf("burner used %.3f cores (%.3f s; its process %.3f to %.3f s); the unlimited anchor %.3f cores", rate, used, p1a-p0b, p1b-p0a, free)
	// The quota is an upper bound; USER_HZ tick accounting on v1 is coarse.
	if rate > 0.55 {
		t.Errorf("burner used %.3f cores, limit 0.5", rate)
	}
	// The scrapes lie between the reads of the process's CPU time; user
	// and system are each rounded to a tick (10 ms) in both sources.
	const ticks = 0.05
	if used < p1a-p0b-ticks || used > p1b-p0a+ticks {
		t.Errorf("berth counted %.3f s of CPU for the burner; its process used between %.3f and %.3f s in the window: is the CPU counter read right?", used, p1a-p0b, p1b-p0a)
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
