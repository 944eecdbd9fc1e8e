package config

import (
	"strings"
	"syscall"
	"testing"

	"github.com/berthd/berth/spec"
)

// kill_mode and kill_signal: [agent]'s are every process's default, a
// process's own override them, a signal may be written without SIG, and a
// wrong value is refused with its position and the allowed values.
func TestKillModeAndSignal(t *testing.T) {
	src := `[agent]
kill_mode = "mixed"
kill_signal = "INT"

[[connector]]
name = "inherits"
  [connector.run]
  command = ["/bin/true"]

[[connector]]
name = "own"
  [connector.run]
  command = ["/bin/true"]
  kill_mode = "process"
  kill_signal = "SIGQUIT"
`
	c, err := Parse("t.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.KillMode != spec.KillMixed || c.Agent.KillSignal != "SIGINT" {
		t.Errorf("[agent] kill_mode %q kill_signal %q, want mixed SIGINT", c.Agent.KillMode, c.Agent.KillSignal)
	}
	want := map[string]struct {
		mode spec.KillMode
		sig  spec.Signal
		num  syscall.Signal
	}{"inherits": {spec.KillMixed, "SIGINT", syscall.SIGINT}, "own": {spec.KillProcess, "SIGQUIT", syscall.SIGQUIT}}
	for _, j := range c.Jobs() {
		w := want[j.ID]
		if j.Process.KillMode != w.mode || j.Process.KillSignal != w.sig || j.Process.KillSignal.Number() != w.num {
			t.Errorf("job %s: kill_mode %q kill_signal %q (%d), want %q %q (%d)", j.ID, j.Process.KillMode, j.Process.KillSignal, j.Process.KillSignal.Number(), w.mode, w.sig, w.num)
		}
	}

	// Neither set: systemd's defaults.
	c, err = Parse("t.toml", []byte("[[connector]]\nname = \"a\"\n  [connector.run]\n  command = [\"/bin/true\"]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if j := c.Jobs()[0]; j.Process.KillMode != spec.KillControlGroup || j.Process.KillSignal != "SIGTERM" || j.Process.KillSignal.Number() != syscall.SIGTERM {
		t.Errorf("defaults: kill_mode %q kill_signal %q, want control-group SIGTERM", j.Process.KillMode, j.Process.KillSignal)
	}

	for _, bad := range []struct{ src, want string }{
		{"[agent]\nkill_mode = \"cgroup\"\n", `t.toml:2:1: agent.kill_mode: "cgroup" is not a kill mode (allowed: control-group, mixed, process)`},
		{"[agent]\nkill_signal = \"SIGSTOP\"\n", `t.toml:2:1: agent.kill_signal: "SIGSTOP" is not a stop signal (allowed: SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH, SIGKILL), each with or without its SIG prefix`},
		{"[agent]\nkill_signal = \"term\"\n", `t.toml:2:1: agent.kill_signal: "term" is not a stop signal`},
		{"[agent]\nkill_signal = 15\n", `t.toml:2:1: agent.kill_signal: must be a string, not integer`},
		{"[[connector]]\nname = \"a\"\n  [connector.run]\n  command = [\"/bin/true\"]\n  kill_signal = \"\"\n", `t.toml:5:3: connector[0].run.kill_signal: "" is not a stop signal`},
		{"[[connector]]\nname = \"a\"\n  [connector.run]\n  command = [\"/bin/true\"]\n  kill_mode = \"none\"\n", `t.toml:5:3: connector[0].run.kill_mode: "none" is not a kill mode (allowed: control-group, mixed, process)`},
	} {
		_, err := Parse("t.toml", []byte(bad.src), nil)
		if err == nil || !strings.HasPrefix(err.Error(), bad.want) {
			t.Errorf("%q: got %v, want %s", bad.src, err, bad.want)
		}
	}
}

// A change of kill_mode or kill_signal is a change of the job's definition
// that DiffJobs names.
func TestDiffNamesKillSettings(t *testing.T) {
	var o, n spec.Job
	o.Process.KillMode, o.Process.KillSignal = spec.KillControlGroup, "SIGTERM"
	n.Process.KillMode, n.Process.KillSignal = spec.KillMixed, "SIGINT"
	var got []string
	for _, c := range DiffJobs(o, n) {
		got = append(got, c.String())
	}
	s := strings.Join(got, "; ")
	if !strings.Contains(s, "kill_mode: control-group → mixed") || !strings.Contains(s, "kill_signal: SIGTERM → SIGINT") {
		t.Errorf("DiffJobs: %s", s)
	}
}
