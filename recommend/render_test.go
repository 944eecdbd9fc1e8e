package recommend

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// agentFile is an agent file whose connectors' limits are replaced by
// Render's tables: %s are the two connectors' tables.
const agentFile = `[agent]
id = "host-a"

[static]
connectors = ["orders-sink", "audit"]
tasks = ["orders-sink-0", "orders-sink-1"]

[[connector]]
name = "orders-sink"
tasks = 2
  [connector.run]
  command = ["/bin/sh", "-c", "exec sleep infinity"]
  [connector.task]
  command = ["/bin/sh", "-c", "exec sleep infinity"]
  restart = "on-failure"
%s
[[connector]]
name = "audit"
  [connector.run]
  command = ["/bin/sh", "-c", "exec sleep infinity"]
%s`

// recFor is a recommendation of a job with some history.
func recFor(t *testing.T, job string, cores float64, peak uint64, hist time.Duration) Recommendation {
	t.Helper()
	f := newFeed(t, DefaultParams())
	f.job = job
	f.m.ObserveCPU(job, CPUSample{Time: f.at})
	for end := f.at.Add(hist); f.at.Before(end); {
		f.cpu(15*time.Second, cores, 0, 0)
		f.mem(peak/2, peak)
	}
	return f.rec(limits.Limits{}, Host{CPUs: 2})
}

// Render's tables, pasted into an agent file in place of each
// connector's limits, make a file berth's configuration accepts, with
// the recommended limits and the kept ones, on v1 and on v2.
func TestRenderValidates(t *testing.T) {
	kept := limits.Limits{
		CPU: 1.5, CPUPeriod: 50 * time.Millisecond, CPUWeight: 200, Cpuset: "0-1", Memory: 512 << 20, MemoryHigh: 400 << 20,
		MemoryLow: 32 << 20, MemorySwap: 64 << 20, Pids: 128, IOWeight: 300, IO: []limits.IOLimit{{Device: "/", WriteBPS: 20 << 20, ReadIOPS: 1000}},
	}
	run := recFor(t, "orders-sink", 0.05, 30<<20, 2*time.Hour)
	t0r := recFor(t, "orders-sink-0", 0.4, 70<<20, 25*time.Hour)
	t1r := recFor(t, "orders-sink-1", 0.6, 60<<20, 25*time.Hour)
	audit := recFor(t, "audit", 3, 900<<20, time.Hour) // more than the host's 2 CPUs: capped
	targets := []Target{
		{Connector: "orders-sink", Kind: spec.KindTask, Current: kept, Rec: t1r},
		{Connector: "orders-sink", Kind: spec.KindConnector, Current: limits.Limits{CPU: 0.1, Memory: 32 << 20}, Rec: run},
		{Connector: "orders-sink", Kind: spec.KindTask, Current: kept, Rec: t0r},
		{Connector: "audit", Kind: spec.KindConnector, Rec: audit},
	}
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			hst := Host{CPUs: 2, MemoryHigh: v2}
			var out bytes.Buffer
			if err := Render(&out, targets, hst, t0); err != nil {
				t.Fatal(err)
			}
			text := out.String()
			// One fragment per connector, in name order.
			i := strings.Index(text, "# connector orders-sink:")
			if !strings.HasPrefix(text, "# connector audit:") || i < 0 {
				t.Fatalf("fragments out of order:\n%s", text)
			}
			file := fmt.Sprintf(agentFile, text[i:], text[:i])
			cfg, err := config.Parse("berth.toml", []byte(file), host.Local())
			if err != nil {
				var ps *config.Problems
				errors.As(err, &ps)
				t.Fatalf("the file with Render's tables does not validate: %v\n%s", err, file)
			}
			byName := map[string]spec.Connector{}
			for _, c := range cfg.Workload.Connectors {
				byName[c.Name] = c
			}
			// The task template: the largest of each resource, the rest kept.
			task := byName["orders-sink"].Task.Limits
			want := kept
			want.CPU, want.Memory = t1r.CPU, t0r.Memory
			if v2 {
				want.MemoryHigh = t0r.MemoryHigh
			} else {
				want.MemoryHigh = t0r.MemoryHigh // v1 with one in force: the pressure threshold
			}
			if fmt.Sprint(task) != fmt.Sprint(want) {
				t.Errorf("task limits\n got %+v\nwant %+v", task, want)
			}
			runL := byName["orders-sink"].Run.Limits
			wantRun := limits.Limits{CPU: run.CPU, Memory: run.Memory}
			if v2 {
				wantRun.MemoryHigh = run.MemoryHigh
			}
			if fmt.Sprint(runL) != fmt.Sprint(wantRun) {
				t.Errorf("run limits\n got %+v\nwant %+v", runL, wantRun)
			}
			if a := byName["audit"].Run.Limits; a.CPU != 2 || a.Memory != audit.Memory {
				t.Errorf("audit limits %+v", a)
			}
			for _, s := range []string{
				"# orders-sink-0: 25h0m0s of samples", "#   note: low confidence: 2h0m0s", "VPA's defaults on the same samples",
				"sized for the largest", "(orders-sink-1)", "# kept",
			} {
				if !strings.Contains(text, s) {
					t.Errorf("output lacks %q:\n%s", s, text)
				}
			}
			if !v2 && !strings.Contains(text, "# memory_high = ") {
				t.Errorf("v1 without memory_high in force: no commented memory_high:\n%s", text)
			}
		})
	}
}

// A job without samples of a kind keeps its limit of that kind.
func TestRenderKeeps(t *testing.T) {
	m, _ := New(DefaultParams())
	m.ObserveMemory("a", MemorySample{Time: t0, CurrentBytes: 10 << 20})
	r, _ := m.Recommend("a", t0, limits.Limits{}, Host{})
	var out bytes.Buffer
	if err := Render(&out, []Target{{Connector: "a", Kind: spec.KindConnector, Current: limits.Limits{CPU: 0.3}, Rec: r}}, Host{}, t0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "cpu = 0.3") || !strings.Contains(out.String(), "kept: no CPU samples") {
		t.Errorf("cpu not kept:\n%s", out.String())
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		b    int64
		want string
	}{{80 << 20, `"80MiB"`}, {2 << 30, `"2GiB"`}, {3392 << 10, `"3392KiB"`}, {1000, "1000"}, {3 << 40, `"3TiB"`}} {
		if got := tomlBytes(c.b); got != c.want {
			t.Errorf("tomlBytes(%d) = %s, want %s", c.b, got, c.want)
		}
	}
	if got := tomlString("a\"b\\c\n"); got != `"a\"b\\c\u000A"` {
		t.Errorf("tomlString: %s", got)
	}
	for _, c := range []struct {
		b    float64
		want string
	}{{900, "900B"}, {71.3 * (1 << 20), "71.3MiB"}, {1.5 * (1 << 30), "1.50GiB"}, {512 << 10, "512KiB"}} {
		if got := human(c.b); got != c.want {
			t.Errorf("human(%v) = %s, want %s", c.b, got, c.want)
		}
	}
}
