package config

import (
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

func TestDiffJobs(t *testing.T) {
	old := spec.Job{ID: "a", Group: "g", Process: spec.Process{Command: []string{"sleep", "1"}, Env: map[string]string{"A": "1"},
		Restart: spec.RestartAlways, Limits: limits.Limits{CPU: 0.5, Memory: 64 << 20}}}
	new := old
	new.Group = ""
	new.Process.Command = []string{"sleep", "2"}
	new.Process.Env = map[string]string{"B": ""}
	new.Process.User = "nobody"
	new.Process.StopTimeout = 5 * time.Second
	new.Process.Limits = limits.Limits{CPU: 0.5, Memory: 96 << 20, MemoryLow: 32 << 20, IO: []limits.IOLimit{{Device: "/", WriteBPS: 1 << 20}}}
	var got []string
	for _, c := range DiffJobs(old, new) {
		got = append(got, c.String())
	}
	want := []string{
		`command: ["sleep", "1"] → ["sleep", "2"]`,
		`env.A: [hidden] → (unset)`,
		`env.B: (unset) → [hidden]`,
		`group: g → (unset)`,
		`limits.io[0]: (unset) → device=/ read_bps=0 write_bps=1048576 read_iops=0 write_iops=0`,
		`limits.memory: 67108864 → 100663296`,
		`limits.memory_low: (unset) → 33554432`,
		`stop_timeout: (unset) → 5s`,
		`user: (unset) → nobody`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("DiffJobs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := DiffJobs(old, old); len(d) != 0 {
		t.Errorf("DiffJobs(same) = %v", d)
	}
}

func TestDiffConfig(t *testing.T) {
	parse := func(s string) *Config {
		t.Helper()
		c, err := Parse("d.toml", []byte(s), limitsHost())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := parse(`[agent]
id = "h"
stop_timeout = "10s"
[static]
tasks = ["c-0"]
[[group]]
name = "g"
limits = { memory = "1GiB" }
[[connector]]
name = "c"
tasks = 1
  [connector.task]
  command = ["x"]
[[connector]]
name = "gone"
`)
	b := parse(`[agent]
id = "h"
stop_timeout = "5s"
[static]
tasks = ["c-0", "c-1"]
[[group]]
name = "g"
limits = { memory = "2GiB" }
[[connector]]
name = "c"
tasks = 2
  [connector.task]
  command = ["x"]
[[connector]]
name = "new"
`)
	var got []string
	for _, c := range DiffConfig(a, b) {
		got = append(got, c.String())
	}
	want := []string{
		"agent.stop_timeout: 10s → 5s",
		`static.tasks: ["c-0"] → ["c-0", "c-1"]`,
		"group g: limits.memory: 1073741824 → 2147483648",
		"connector c: tasks: 1 → 2",
		"connector gone: defined → (unset)",
		"connector new: (unset) → defined",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("DiffConfig:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
