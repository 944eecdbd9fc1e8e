package workload

import (
	"errors"
	"testing"

	"github.com/berthd/berth/config"
)

// FuzzParse feeds the decoder of the stored workload two connector bodies
// (stored as "a" and "a-0": names that can clash with task job IDs) and a
// group body (stored as "g"). Whatever the bytes, Parse must not panic and
// must keep its promise: the workload it returns validates, and every
// stored definition is either in it or left out with a *DefinitionError,
// never both, never neither. Seed corpus: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte("name = \"a\"\ntasks = 1\ngroup = \"g\"\n[task]\ncommand = [\"x\"]\n"), []byte("name = \"a-0\"\n[run]\ncommand = [\"y\"]\n"), []byte("name = \"g\"\nlimits = { memory = \"64MiB\" }\n"))
	f.Add([]byte("name = \"a\"\n"), []byte("name = \"b\"\n"), []byte("name = \"g\"\nlimits = { memory = \"lots\" }\n"))
	f.Fuzz(func(t *testing.T, a, a0, g []byte) {
		conns := map[string][]byte{"a": a, "a-0": a0}
		groups := map[string][]byte{"g": g}
		w, err := Parse(conns, groups, config.LocalHost())
		if w == nil {
			t.Fatal("nil workload")
		}
		if verr := config.ValidateWorkload(w); verr != nil {
			t.Fatalf("the workload Parse returned does not validate: %v", verr)
		}
		left := map[string]bool{}
		if err != nil {
			for _, e := range unjoin(err) {
				var d *DefinitionError
				if !errors.As(e, &d) {
					t.Fatalf("%T %v is not a *DefinitionError", e, e)
				}
				left[string(d.Kind)+"/"+d.Name] = true
			}
		}
		kept := map[string]bool{}
		for _, c := range w.Connectors {
			kept["connector/"+c.Name] = true
		}
		for _, gr := range w.Groups {
			kept["group/"+gr.Name] = true
		}
		for _, k := range []string{"connector/a", "connector/a-0", "group/g"} {
			if kept[k] == left[k] {
				t.Fatalf("%s: kept %v, left out %v; want exactly one (error: %v)", k, kept[k], left[k], err)
			}
		}
		if len(kept)+len(left) != 3 {
			t.Fatalf("kept %v and left out %v: not the three stored definitions", kept, left)
		}
	})
}
