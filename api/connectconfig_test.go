package api

import (
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// GET /connectors/{name}/config shows every limit the definition sets,
// from the table of limits (limits.Keys), and the process keys a change
// of the definition names (kill_mode and kill_signal among them).
func TestConnectorConfigShowsEveryLimit(t *testing.T) {
	l := limits.Limits{CPU: 1.5, CPUPeriod: 50 * time.Millisecond, CPUWeight: 200, Cpuset: "0-1", Memory: 512 << 20,
		MemoryHigh: 448 << 20, MemoryLow: 256 << 20, MemorySwap: 1 << 20, Pids: 64, IOWeight: 300,
		IO: []limits.IOLimit{{Device: "/dev/a&b", ReadBPS: 1, WriteIOPS: 2}}}
	c := spec.Connector{Name: "c", Run: &spec.Process{Command: []string{"/bin/x"}, Restart: spec.RestartAlways,
		KillMode: spec.KillMixed, KillSignal: "SIGINT", Limits: l}}
	cfg := connectorConfig(c)
	want := map[string]string{
		"run.limits.cpu": "1.5", "run.limits.cpu_period": "50ms", "run.limits.cpu_weight": "200", "run.limits.cpuset": "0-1",
		"run.limits.memory": "536870912", "run.limits.memory_high": "469762048", "run.limits.memory_low": "268435456",
		"run.limits.memory_swap": "1048576", "run.limits.pids": "64", "run.limits.io_weight": "300",
		"run.limits.io": `[{"device":"/dev/a&b","read_bps":1,"write_iops":2}]`,
		"run.kill_mode": "mixed", "run.kill_signal": "SIGINT",
	}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("config[%q] = %q, want %q", k, cfg[k], v)
		}
	}
	for _, k := range limits.Keys() {
		if _, ok := cfg["run.limits."+k.Name]; !ok {
			t.Errorf("limit %s set but not shown", k.Name)
		}
	}
	c.Run.Limits = limits.Limits{}
	for k := range connectorConfig(c) {
		if strings.HasPrefix(k, "run.limits.") {
			t.Errorf("no limit set, yet %s shown", k)
		}
	}
}
