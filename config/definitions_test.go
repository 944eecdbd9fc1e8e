package config

import (
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

// connectorsFile is a connectors-only file (the input of berth apply) using
// every shape a block may take: inline tables, arrays of inline tables,
// sub-table headers, dotted keys, quoted keys, units of both bases.
const connectorsFile = `# connectors for berth apply
[[group]]
name = "etl"
limits = { cpu = 1, memory = "1GB", pids = 512 }

[[group]]
name = "bare"

[[connector]]
name = "orders"
tasks = 3
group = "etl"
[connector.task]
command = ["/bin/sh", "-c", "echo ${BERTH_JOB_ID} \"quoted\"\n"]
env = { "A_B" = "1", URL = "http://x:1/?a=b#c" }
restart = "always"
stop_timeout = "1500ms"
limits.memory = "64MiB"
limits.cpu = 0.25
limits.cpu_period = "50ms"

[[connector]]
name = "clicks"
[connector.run]
command = ["/bin/true"]
dir = "/tmp"
[connector.run.limits]
memory = 67108864
memory_swap = "0"
pids = 16

[[connector]]
name = "empty"
tasks = 0
`

// The older key "dir" still sets the working directory (files and stored
// definitions written before working_directory keep working).
func TestDirIsWorkingDirectory(t *testing.T) {
	w, err := Parse("t.toml", []byte(connectorsFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range w.Connectors {
		if c.Name == "clicks" {
			if c.Run.Dir != "/tmp" {
				t.Errorf("clicks run dir = %q, want /tmp", c.Run.Dir)
			}
			return
		}
	}
	t.Fatal("no connector clicks")
}

// checkRoundTrip parses every body of defs back and compares it with the
// definition parsed from the whole file.
func checkRoundTrip(t *testing.T, defs *Defs, w spec.Workload) {
	t.Helper()
	if len(defs.Connectors) != len(w.Connectors) || len(defs.Groups) != len(w.Groups) {
		t.Fatalf("defs has %d connectors, %d groups; file has %d, %d", len(defs.Connectors), len(defs.Groups), len(w.Connectors), len(w.Groups))
	}
	for _, want := range w.Connectors {
		body, ok := defs.Connectors[want.Name]
		if !ok {
			t.Fatalf("connector %s missing from defs", want.Name)
		}
		got, err := ParseConnector("connectors/"+want.Name, body, limitsHost())
		if err != nil {
			t.Fatalf("connector %s body does not parse:\n%s\n%v", want.Name, body, err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("connector %s round trip:\n got %+v\nwant %+v\nbody:\n%s", want.Name, *got, want, body)
		}
	}
	for _, want := range w.Groups {
		body, ok := defs.Groups[want.Name]
		if !ok {
			t.Fatalf("group %s missing from defs", want.Name)
		}
		got, err := ParseGroup("groups/"+want.Name, body, limitsHost())
		if err != nil {
			t.Fatalf("group %s body does not parse:\n%s\n%v", want.Name, body, err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("group %s round trip:\n got %+v\nwant %+v\nbody:\n%s", want.Name, *got, want, body)
		}
	}
}

func TestDefinitionsConnectorsFile(t *testing.T) {
	defs, err := Definitions("connectors.toml", []byte(connectorsFile), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	w, err := ParseConnectors("connectors.toml", []byte(connectorsFile), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(defs.Workload, *w) {
		t.Errorf("Defs.Workload = %+v, want %+v", defs.Workload, *w)
	}
	checkRoundTrip(t, defs, *w)
	// Units stay as written; keys are at the top level.
	orders := string(defs.Connectors["orders"])
	for _, want := range []string{`memory = "64MiB"`, `name = "orders"`, `tasks = 3`, `stop_timeout = "1500ms"`, `cpu_period = "50ms"`} {
		if !strings.Contains(orders, want) {
			t.Errorf("orders body lacks %q:\n%s", want, orders)
		}
	}
	if strings.Contains(orders, "[connector") {
		t.Errorf("orders body keeps the [connector] prefix:\n%s", orders)
	}
	if etl := string(defs.Groups["etl"]); !strings.Contains(etl, `memory = "1GB"`) {
		t.Errorf("etl body lost its unit:\n%s", etl)
	}
}

func TestDefinitionsAgentFile(t *testing.T) {
	testutil.RootDisk(t)
	if runtime.NumCPU() < 2 {
		t.Skip("skip: the example needs 2 CPUs (cpu = 2, cpuset = \"0-1\")")
	}
	defs, err := Definitions("berth.toml", []byte(fullExample), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("berth.toml", []byte(fullExample), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	checkRoundTrip(t, defs, cfg.Workload)
	body := string(defs.Connectors["orders-sink"])
	for _, want := range []string{`read_bps = "50MiB"`, `device = "/dev/vda"`, `memory_high = "448MiB"`, `cpu = 1.5`} {
		if !strings.Contains(body, want) {
			t.Errorf("orders-sink body lacks %q:\n%s", want, body)
		}
	}
	for _, other := range []string{"[agent]", "[static]", "[cluster]", "host-a"} {
		if strings.Contains(body, other) {
			t.Errorf("orders-sink body holds %q from another table:\n%s", other, body)
		}
	}
}

// The same definition written in another key order or style gives the
// same bytes, so the store can tell "unchanged" from "updated".
func TestDefinitionsDeterministic(t *testing.T) {
	a := "[[connector]]\nname = \"x\"\ntasks = 1\n[connector.task]\ncommand = [\"/bin/true\"]\nlimits = { memory = \"8MiB\", pids = 4 }\n"
	b := "[[connector]]\ntasks = 1\nname = \"x\" # same\n\n[connector.task.limits]\npids = 4\nmemory = \"8MiB\"\n[connector.task]\ncommand = [ \"/bin/true\" ]\n"
	da, err := Definitions("a.toml", []byte(a), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	db, err := Definitions("b.toml", []byte(b), limitsHost())
	if err != nil {
		t.Fatal(err)
	}
	if string(da.Connectors["x"]) != string(db.Connectors["x"]) {
		t.Errorf("bodies differ:\n%s\n--\n%s", da.Connectors["x"], db.Connectors["x"])
	}
	again, _ := Definitions("a.toml", []byte(a), limitsHost())
	if string(again.Connectors["x"]) != string(da.Connectors["x"]) {
		t.Error("two calls give different bytes")
	}
}

func TestDefinitionsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []string // substrings of the error, each one entry
	}{
		{"bad unit in connectors file",
			"[[group]]\nname = \"g\"\n\n[[connector]]\nname = \"c\"\ntasks = 1\n[connector.task]\ncommand = [\"/bin/true\"]\nlimits = { memory = \"12 parsecs\" }\n",
			[]string{"f.toml:9:12: connector[0].task.limits.memory: "}},
		{"unknown group and unknown key",
			"[[connector]]\nname = \"c\"\ngroup = \"nope\"\ncolour = \"red\"\n",
			[]string{"f.toml:3:1: connector[0].group: group \"nope\" is not defined", "f.toml:4:1: connector[0].colour: unknown key \"colour\"; allowed in connector[0]: "}},
		{"agent file validated as a whole",
			"[agent]\nid = \"a\"\nlisten = \"nowhere\"\n\n[[connector]]\nname = \"c\"\n",
			[]string{"f.toml:3:1: agent.listen: "}},
		{"unknown top-level table makes it an agent file with an unknown key",
			"[agnet]\nid = \"a\"\n\n[[connector]]\nname = \"c\"\n",
			[]string{"f.toml:1:1: agnet: unknown key \"agnet\" (did you mean \"agent\"?)"}},
		{"syntax error", "[[connector]]\nname = \"c\n", []string{"f.toml:2:"}},
		{"duplicate connector", "[[connector]]\nname = \"c\"\n[[connector]]\nname = \"c\"\n", []string{"f.toml:4:1: connector[1].name: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defs, err := Definitions("f.toml", []byte(tc.data), limitsHost())
			if err == nil {
				t.Fatalf("accepted: %+v", defs)
			}
			var errs *Problems
			if !errors.As(err, &errs) {
				t.Fatalf("error %T %v, want *Problems", err, err)
			}
			if defs != nil {
				t.Errorf("defs = %+v with an error", defs)
			}
			if len(errs.List) != len(tc.want) {
				t.Errorf("%d errors, want %d:\n%v", len(errs.List), len(tc.want), err)
			}
			for i, want := range tc.want {
				if i < len(errs.List) && !strings.Contains(errs.List[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs.List[i].Error(), want)
				}
			}
		})
	}
}

func TestDefinitionsEmpty(t *testing.T) {
	for _, data := range []string{"", "# nothing\n", "[agent]\nid = \"a\"\n"} {
		defs, err := Definitions("f.toml", []byte(data), limitsHost())
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if defs.Connectors == nil || defs.Groups == nil || len(defs.Connectors)+len(defs.Groups) != 0 {
			t.Errorf("%q: defs = %+v, want empty non-nil maps", data, defs)
		}
	}
}
