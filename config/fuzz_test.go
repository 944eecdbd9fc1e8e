package config

import (
	"errors"
	"reflect"
	"testing"

	"github.com/berthd/berth/spec"
)

// The fuzz targets of the configuration decoders. Their seed corpora are
// in testdata/fuzz/<target>/ (plus the seeds added below); every input a
// fuzzer found failing is kept there and replayed by `go test`.
// Run one: go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 30s ./config
// (make fuzz runs each for FUZZTIME).

// FuzzParse checks that no input makes the parser, the key locator or the
// validator panic, and that every rejection is an *Problems with entries.
func FuzzParse(f *testing.F) {
	f.Add([]byte(fullExample))
	f.Add([]byte(conn("command = [\"x\", \"${BERTH_TASK}\"]\nlimits = { cpu = 1, memory = \"1.5GiB\", io = [{ device = \"/\", read_bps = 1 }] }\n")))
	f.Add([]byte("[static]\ntasks = [\"c-1\"]\n[[group]]\nname = \"g\"\n"))
	f.Add([]byte("a.b.\"c\" = '''x'''\n[[x.y]]\n[x.y.z]\nd = 1979-05-27 07:32:00Z\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.toml", data, limitsHost())
		if err == nil {
			if c == nil {
				t.Fatal("nil Config without error")
			}
			_ = c.Jobs()
			return
		}
		checkProblems(t, err)
	})
}

// FuzzDefinitions checks the split of a file into the definitions the
// cluster store keeps: a file is rejected only with *Problems, and every
// definition it yields decodes back (ParseConnector, ParseGroup — what
// every agent does with the stored text) into exactly the block the file
// declared, so no agent runs something other than what was applied.
func FuzzDefinitions(f *testing.F) {
	f.Add([]byte(fullExample))
	f.Add([]byte("[[group]]\nname = \"g\"\nlimits = { cpu = 0.5, memory = \"64MiB\" }\n[[connector]]\nname = \"c\"\ngroup = \"g\"\ntasks = 2\n[connector.task]\ncommand = [\"x\"]\nenv = { A = \"1\" }\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		host := LocalHost()
		defs, err := Definitions("fuzz.toml", data, host)
		if err != nil {
			checkProblems(t, err)
			return
		}
		for _, g := range defs.Workload.Groups {
			back, err := ParseGroup("store", defs.Groups[g.Name], host)
			if err != nil {
				t.Fatalf("group %s: stored definition %q does not parse: %v", g.Name, defs.Groups[g.Name], err)
			}
			if !reflect.DeepEqual(*back, g) {
				t.Fatalf("group %s: stored definition %q decodes to\n%+v\nnot the file's\n%+v", g.Name, defs.Groups[g.Name], *back, g)
			}
		}
		for _, c := range defs.Workload.Connectors {
			back, err := ParseConnector("store", defs.Connectors[c.Name], host)
			if err != nil {
				t.Fatalf("connector %s: stored definition %q does not parse: %v", c.Name, defs.Connectors[c.Name], err)
			}
			if !reflect.DeepEqual(*back, c) {
				t.Fatalf("connector %s: stored definition %q decodes to\n%+v\nnot the file's\n%+v", c.Name, defs.Connectors[c.Name], *back, c)
			}
		}
	})
}

// FuzzParseConnector checks the decoder of one stored connector
// definition: no panic; a rejection is *Problems whose every entry names
// the connector definition; an accepted definition has a valid name and
// yields jobs.
func FuzzParseConnector(f *testing.F) {
	f.Add([]byte("name = \"c\"\ntasks = 2\ngroup = \"g\"\n[run]\ncommand = [\"/bin/sleep\", \"1\"]\n[task]\ncommand = [\"x\", \"${BERTH_TASK}\"]\nrestart = \"never\"\n[task.limits]\ncpu = 1.5\nmemory = \"512MiB\"\n"))
	f.Add([]byte("name = \"c\"\n[run]\ncommand = \"x\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConnector("store", data, LocalHost())
		if err != nil {
			checkProblems(t, err)
			return
		}
		if verr := validName(c.Name); verr != nil {
			t.Fatalf("accepted a connector named %q: %v", c.Name, verr)
		}
		w := &spec.Workload{Connectors: []spec.Connector{*c}}
		_ = w.Jobs(0)
	})
}

// FuzzParseGroup is FuzzParseConnector for a stored sharing group.
func FuzzParseGroup(f *testing.F) {
	f.Add([]byte("name = \"g\"\n[limits]\ncpu = 2\nmemory = \"1GiB\"\npids = 100\n"))
	f.Add([]byte("name = \"g\"\nlimits = { io = [{ device = \"/\", write_bps = \"1MiB\" }] }\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGroup("store", data, LocalHost())
		if err != nil {
			checkProblems(t, err)
			return
		}
		if verr := validName(g.Name); verr != nil {
			t.Fatalf("accepted a group named %q: %v", g.Name, verr)
		}
	})
}

// checkProblems fails t unless err is a non-empty *Problems whose text can
// be made.
func checkProblems(t *testing.T, err error) {
	t.Helper()
	var ps *Problems
	if !errors.As(err, &ps) || len(ps.List) == 0 {
		t.Fatalf("error %v (%T) is not a non-empty *Problems", err, err)
	}
	_ = ps.Error()
}
