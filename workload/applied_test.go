package workload

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/cluster/embedetcd"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

// A file applied in full is unchanged (the agent's start skips applying
// it) until the file's digest, or any stored definition, changes: one
// written by `berth apply`, one created, one deleted. And a file of more
// definitions than one transaction holds is stored whole in batches.
func TestFileUnchanged(t *testing.T) {
	emb, err := embedetcd.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(time.Minute))
	defer cancel()
	host := config.LocalHost()
	c, err := cluster.Connect(ctx, cluster.Config{Name: "applied", Endpoints: emb.Endpoints(), Validate: Validator(host)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	const n = 300 // more than etcd's 128 operations per transaction
	var blocks []string
	for i := range n {
		blocks = append(blocks, connBlock(fmt.Sprintf("c%03d", i), ""))
	}
	defs, err := config.Definitions("A.toml", []byte(agentFile("A", blocks...)), host)
	if err != nil {
		t.Fatal(err)
	}
	unchanged := func(what, digest string, want bool) {
		t.Helper()
		got, err := c.FileUnchanged(ctx, "A", digest)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got != want {
			t.Errorf("%s: FileUnchanged = %v, want %v", what, got, want)
		}
	}
	unchanged("never applied", "d1", false)
	p, err := ApplyFile(ctx, c.Store, defs, "A", host)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Created) != n {
		t.Fatalf("created %d definitions, want %d", len(p.Created), n)
	}
	if got, _ := c.FileDefs(ctx, spec.DefConnector, "A"); len(got) != n {
		t.Fatalf("A's file holds %d stored definitions, want %d", len(got), n)
	}
	// Applied again: nothing written.
	if written, err := c.PutFileDefs(ctx, spec.DefConnector, defs.Connectors, "A"); err != nil || len(written) != 0 {
		t.Fatalf("PutFileDefs of an applied file wrote %v (%v), want nothing", written, err)
	}
	if err := c.MarkFileApplied(ctx, "A", "d1"); err != nil {
		t.Fatal(err)
	}
	unchanged("applied", "d1", true)
	unchanged("another file", "d2", false)
	unchanged("another agent", "d1", true)

	body := []byte(strings.Replace(string(defs.Connectors["c000"]), "1000", "2000", 1))
	if err := c.PutConnector(ctx, "c000", body); err != nil {
		t.Fatal(err)
	}
	unchanged("a definition updated by berth apply", "d1", false)
	if err := c.MarkFileApplied(ctx, "A", "d1"); err != nil {
		t.Fatal(err)
	}
	unchanged("applied again", "d1", true)
	if err := c.PutConnector(ctx, "extra", []byte(strings.Replace(string(defs.Connectors["c001"]), "c001", "extra", 1))); err != nil {
		t.Fatal(err)
	}
	unchanged("a definition created", "d1", false)
	if err := c.MarkFileApplied(ctx, "A", "d1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteConnector(ctx, "extra"); err != nil {
		t.Fatal(err)
	}
	unchanged("a definition deleted", "d1", false)
}
