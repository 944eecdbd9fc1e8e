package config

import (
	"strings"
	"testing"

	"github.com/berthd/berth/spec"
)

// warningsOf parses src and returns its warnings as strings.
func warningsOf(t *testing.T, src string) []string {
	t.Helper()
	c, err := Parse("w.toml", []byte(src), limitsHost())
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	out := make([]string, len(c.Warnings))
	for i, w := range c.Warnings {
		out[i] = w.Error()
	}
	return out
}

// C19: every [static] entry that names no job of the file is a warning
// with its position, whatever the mistake: a typo in the connector name, a
// task ID without its index, an index out of range, a connector without
// [connector.run] declared as a connector job, a task declared as a
// connector. Correct entries give none.
func TestDeclarationsMatchingNothing(t *testing.T) {
	const ingest = `
[[connector]]
name = "ingest"
tasks = 3
  [connector.task]
  command = ["sleep", "1"]

[[connector]]
name = "web"
  [connector.run]
  command = ["sleep", "1"]
`
	for _, tc := range []struct {
		name, static string
		want         []string // each a substring of one warning, in order
	}{
		{"all correct", `connectors = ["web"]` + "\n" + `tasks = ["ingest-0", "ingest-1", "ingest-2"]`, nil},
		{"typo in the connector of a task", `tasks = ["ingest-0", "ingest-1", "ingset-2"]`,
			[]string{`w.toml:3:34: static.tasks[2]: "ingset-2" names no task of a connector in this file (did you mean "ingest-2"?)`}},
		{"index out of range", `tasks = ["ingest-3"]`,
			[]string{`w.toml:3:10: static.tasks[0]: task 3 of connector "ingest" is out of range (tasks = 3: "ingest-0" .. "ingest-2")`}},
		{"task ID without its index", `tasks = ["ingest"]`,
			[]string{`static.tasks[0]: "ingest" is a connector, not a task ID: its tasks are "ingest-0" .. "ingest-2"`}},
		{"connector without a run block", `connectors = ["ingest"]`,
			[]string{`static.connectors[0]: connector "ingest" has no [connector.run], so it has no connector job: declare its tasks ("ingest-0" .. "ingest-2") in static.tasks`}},
		{"typo in a connector name", `connectors = ["wbe"]`,
			[]string{`static.connectors[0]: "wbe" names no connector with a [connector.run] in this file (did you mean "web"?)`}},
		{"a task declared as a connector", `connectors = ["ingest-1"]`,
			[]string{`static.connectors[0]: "ingest-1" is task 1 of connector "ingest", not a connector job: declare it in static.tasks`}},
		{"far from anything: no suggestion", `tasks = ["payments-0"]`,
			[]string{`static.tasks[0]: "payments-0" names no task of a connector in this file; it runs only once one is defined`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := warningsOf(t, "[agent]\n[static]\n"+tc.static+"\n"+ingest)
			if len(got) != len(tc.want) {
				t.Fatalf("warnings:\n%s\nwant %d", strings.Join(got, "\n"), len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d:\n%s\nwant it to contain:\n%s", i, got[i], w)
				}
			}
		})
	}
}

// A one-letter SI unit validates but is read otherwise by systemd: a
// warning with both readings and the unit to write.
func TestUnitWarnings(t *testing.T) {
	got := warningsOf(t, `[agent]
log_max_size = "10M"
[[group]]
name = "g"
limits = { memory = "1G" }
[[connector]]
name = "c"
  [connector.run]
  command = ["sleep", "1"]
  limits = { memory = "512MiB", memory_high = "500MB", io = [{ device = "/", write_bps = "1.5K" }] }
`)
	want := []string{
		`w.toml:2:1: agent.log_max_size: "10M" is 10000000 bytes (10 × 10^6): K, M, G, T are powers of 1000 here, but systemd reads "10M" as 10485760 bytes (10 × 2^20); write "10MiB" for that, or "10MB" to keep 10000000 bytes`,
		`w.toml:5:12: group[0].limits.memory: "1G" is 1000000000 bytes (1 × 10^9): K, M, G, T are powers of 1000 here, but systemd reads "1G" as 1073741824 bytes (1 × 2^30); write "1GiB" for that, or "1GB" to keep 1000000000 bytes`,
		`connector[0].run.limits.io[0].write_bps: "1.5K" is 1500 bytes (1.5 × 10^3)`,
	}
	if len(got) != len(want) {
		t.Fatalf("warnings:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("warning %d:\n%s\nwant it to contain:\n%s", i, got[i], want[i])
		}
	}
	// The warning names its definition, as errors do.
	c, _ := Parse("w.toml", []byte("[[group]]\nname = \"g\"\nlimits = { memory = \"1G\" }\n"), limitsHost())
	if d := c.Warnings[0].Def; d.Kind != spec.DefGroup || d.Name != "g" || d.Key != "limits.memory" {
		t.Errorf("warning Def = %+v", d)
	}
}

// CheckDeclarations against a larger workload (the file's and the store's)
// drops the warnings of entries the larger one defines.
func TestCheckDeclarationsAgainstStore(t *testing.T) {
	c, err := Parse("w.toml", []byte("[static]\ntasks = [\"remote-0\", \"remot-1\"]\n"), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 2 {
		t.Fatalf("file-only warnings = %v", c.Warnings)
	}
	store := &spec.Workload{Connectors: []spec.Connector{{Name: "remote", Tasks: 2, Task: &spec.Process{Command: []string{"x"}}}}}
	ws := c.CheckDeclarations(store, "this file or the cluster's store")
	if len(ws) != 1 || ws[0].Error() != `w.toml:2:22: static.tasks[1]: "remot-1" names no task of a connector in this file or the cluster's store (did you mean "remote-1"?); it runs only once one is defined` {
		t.Errorf("warnings against the store = %v", ws)
	}
}

func TestDidYouMean(t *testing.T) {
	cands := []string{"ingest-0", "ingest-1", "ingest-2", "web"}
	for _, tc := range []struct{ in, want string }{
		{"ingset-2", ` (did you mean "ingest-2"?)`},
		{"ingest-7", ` (did you mean "ingest-0"?)`},
		{"wbe", ` (did you mean "web"?)`},
		{"we", ""}, // 1 edit of 2 bytes is too much
		{"payments-0", ""},
	} {
		if got := didYouMean(tc.in, cands); got != tc.want {
			t.Errorf("didYouMean(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
