package workload

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/cluster/embedetcd"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

// connBlock is one [[connector]] block with its own job.
func connBlock(name, group string) string {
	g := ""
	if group != "" {
		g = "group = \"" + group + "\"\n"
	}
	return "[[connector]]\nname = \"" + name + "\"\n" + g + "[connector.run]\ncommand = [\"/bin/sleep\", \"1000\"]\n"
}

// agentFile is an agent file with the given blocks.
func agentFile(id string, blocks ...string) string {
	return "[agent]\nid = \"" + id + "\"\n" + strings.Join(blocks, "")
}

// C21 at the store: what an agent's file created it deletes when it leaves
// the file; what `berth apply` stored, or another agent's file still
// holds, it never deletes; a group still named by a stored connector is
// kept; apply adopts what an agent's file stored.
func TestApplyFileOwnership(t *testing.T) {
	emb, err := embedetcd.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(time.Minute))
	defer cancel()
	host := config.LocalHost()
	c, err := cluster.Connect(ctx, cluster.Config{Name: "applyfile", Endpoints: emb.Endpoints(), Validate: Validator(host)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	file := func(id string, blocks ...string) *config.Defs {
		t.Helper()
		d, err := config.Definitions(id+".toml", []byte(agentFile(id, blocks...)), host)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	stored := func() (conns, groups map[string][]byte) {
		t.Helper()
		conns, err := c.Connectors(ctx)
		if err != nil {
			t.Fatal(err)
		}
		groups, err = c.Groups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return conns, groups
	}
	applyFile := func(what string, d *config.Defs, id string, want Plan) {
		t.Helper()
		got, err := ApplyFile(ctx, c.Store, d, id, host)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		samePlan(t, what, got, want)
	}

	// Agent A's file creates a and b.
	applyFile("A creates", file("A", connBlock("a", ""), connBlock("b", "")), "A",
		Plan{Created: []string{"connector/a", "connector/b"}})
	if got, _ := c.FileDefs(ctx, spec.DefConnector, "A"); strings.Join(got, ",") != "a,b" {
		t.Fatalf("FileDefs(A) = %v", got)
	}
	// b leaves A's file: deleted.
	applyFile("A drops b", file("A", connBlock("a", "")), "A",
		Plan{Deleted: []string{"connector/b"}, Unchanged: []string{"connector/a"}})
	if conns, _ := stored(); len(conns) != 1 || conns["a"] == nil {
		t.Fatalf("stored after A dropped b: %v", conns)
	}

	// berth apply stores c; A's file names c too, then drops it: c stays.
	ops := wlDefs(t, connBlock("c", ""))
	if _, err := Apply(ctx, c.Store, ops, false, host); err != nil {
		t.Fatal(err)
	}
	applyFile("A holds c", file("A", connBlock("a", ""), connBlock("c", "")), "A",
		Plan{Unchanged: []string{"connector/a", "connector/c"}})
	applyFile("A drops c", file("A", connBlock("a", "")), "A", Plan{Unchanged: []string{"connector/a"}})
	if conns, _ := stored(); conns["c"] == nil {
		t.Fatal("an agent deleted a connector that berth apply stored")
	}

	// A and B both hold d: A's drop only releases it; B's deletes it.
	applyFile("A holds d", file("A", connBlock("a", ""), connBlock("d", "")), "A",
		Plan{Created: []string{"connector/d"}, Unchanged: []string{"connector/a"}})
	applyFile("B holds d", file("B", connBlock("d", "")), "B", Plan{Unchanged: []string{"connector/d"}})
	applyFile("A drops d", file("A", connBlock("a", "")), "A",
		Plan{Released: []string{"connector/d"}, Unchanged: []string{"connector/a"}})
	if conns, _ := stored(); conns["d"] == nil {
		t.Fatal("d deleted while B's file still holds it")
	}
	applyFile("B drops d", file("B"), "B", Plan{Deleted: []string{"connector/d"}})

	// A's group g is named by a connector berth apply stored: kept when it
	// leaves A's file, deleted once unused.
	g := "[[group]]\nname = \"g\"\nlimits = { pids = 10 }\n"
	applyFile("A creates g", file("A", g, connBlock("a", "")), "A",
		Plan{Created: []string{"group/g"}, Unchanged: []string{"connector/a"}})
	// (as a connectors file that restates g would adopt g too, e is put
	// alone)
	if err := c.PutConnector(ctx, "e", wlDefs(t, g+connBlock("e", "g")).Connectors["e"]); err != nil {
		t.Fatal(err)
	}
	applyFile("A drops g", file("A", connBlock("a", "")), "A",
		Plan{Kept: []string{"group/g"}, Unchanged: []string{"connector/a"}})
	if _, groups := stored(); groups["g"] == nil {
		t.Fatal("a group still in use was deleted")
	}

	// berth apply adopts what an agent's file stored unchanged; A then
	// never deletes it.
	p, err := Apply(ctx, c.Store, wlDefs(t, connBlock("a", "")), false, host)
	if err != nil {
		t.Fatal(err)
	}
	samePlan(t, "apply adopts a", p, Plan{Adopted: []string{"connector/a"}})
	applyFile("A drops a", file("A"), "A", Plan{Kept: []string{"group/g"}})
	if conns, _ := stored(); conns["a"] == nil {
		t.Fatal("an agent deleted a connector that berth apply adopted")
	}
	if owners, _ := c.FileOwners(ctx, spec.DefConnector); len(owners) != 0 {
		t.Errorf("file owners of connectors left: %v", owners)
	}
	// Once e is gone, A gives g up for good.
	if err := c.DeleteConnector(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	applyFile("A gives g up", file("A"), "A", Plan{Deleted: []string{"group/g"}})
}
