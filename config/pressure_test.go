package config

import (
	"testing"
	"time"

	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// memory_pressure and its rule: read with their defaults, bounds checked
// at the key's FILE:LINE:COL, and a restart refused without the threshold
// the host's cgroup version needs (host.CheckPressure).
func TestMemoryPressureKeys(t *testing.T) {
	v1, v2 := &host.Host{MemoryCgroup: 1}, &host.Host{MemoryCgroup: 2}
	c, err := Parse("t.toml", []byte(conn("command = [\"x\"]\nmemory_pressure = \"restart\"\nmemory_pressure_limit = 25\nlimits = { memory_high = \"48MiB\" }\n")), v1)
	if err != nil {
		t.Fatal(err)
	}
	got := c.Workload.Connectors[0].Task.MemoryPressure
	if want := (spec.PressureRule{Action: spec.PressureRestart, Limit: 25, Duration: spec.DefaultPressureDuration}); got != want {
		t.Errorf("rule %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name, body string
		h          *host.Host
		want       string
	}{
		{"bad action", "command = [\"x\"]\nmemory_pressure = \"kill\"\n", nil,
			`t.toml:6:1: connector[0].task.memory_pressure: "kill" is not a memory pressure action (allowed: none, notify, restart)`},
		{"limit 0", "command = [\"x\"]\nmemory_pressure = \"notify\"\nmemory_pressure_limit = 0\n", nil,
			"t.toml:7:1: connector[0].task.memory_pressure_limit: must be more than 0 and at most 100 (percent of wall time stalled), not 0"},
		{"limit 101", "command = [\"x\"]\nmemory_pressure = \"notify\"\nmemory_pressure_limit = 101\n", nil,
			"t.toml:7:1: connector[0].task.memory_pressure_limit: must be more than 0 and at most 100 (percent of wall time stalled), not 101"},
		{"short duration", "command = [\"x\"]\nmemory_pressure = \"notify\"\nmemory_pressure_duration = \"100ms\"\n", nil,
			"t.toml:7:1: connector[0].task.memory_pressure_duration: must be at least 500ms (the kernel's shortest PSI trigger window, Documentation/accounting/psi.rst) and at most 1m0s, not 100ms"},
		{"v1 restart without memory_high", "command = [\"x\"]\nmemory_pressure = \"restart\"\nlimits = { memory = \"64MiB\" }\n", v1,
			`t.toml:6:1: connector[0].task.memory_pressure: "restart" needs limits.memory_high on this host: its memory is accounted by cgroup v1, whose pressure stall gives no warning before the limit, so the restart fires when the job's usage crosses memory_high (which v1 does not enforce)`},
		{"v2 restart without a limit", "command = [\"x\"]\nmemory_pressure = \"restart\"\n", v2,
			`t.toml:6:1: connector[0].task.memory_pressure: "restart" needs limits.memory_high or limits.memory: a job without a memory limit of its own is never under memory pressure of its own (on cgroup v1 memory_high is the threshold it fires at)`},
		{"v2 restart with memory", "command = [\"x\"]\nmemory_pressure = \"restart\"\nlimits = { memory = \"64MiB\" }\n", v2, ""},
		{"notify needs no limit", "command = [\"x\"]\nmemory_pressure = \"notify\"\nmemory_pressure_duration = \"4s\"\n", v1, ""},
	} {
		_, err := Parse("t.toml", []byte(conn(tc.body)), tc.h)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s:\n got %v\nwant %s", tc.name, err, tc.want)
		}
	}
	if d := spec.MinPressureDuration; d != 500*time.Millisecond {
		t.Errorf("MinPressureDuration %v", d)
	}
}
