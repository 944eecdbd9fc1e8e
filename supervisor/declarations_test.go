package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/source"
)

// A member's desired workload holds only its own share's definitions (per
// -member publication): a [static] declaration of a connector stored by
// `berth apply` but not in this member's share right now (its jobs on a
// standby) is checked against the store, by name, and draws no warning; a
// connector the store does not have either does.
func TestDeclarationsCheckedAgainstTheStore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "berth.toml")
	body := "[agent]\nid = \"sv\"\ndata_dir = \"" + filepath.Join(dir, "data") + "\"\n" +
		"[static]\nconnectors = [\"beta\", \"gamma\"]\ntasks = [\"beta-1\"]\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, host.Local())
	if err != nil {
		t.Fatal(err)
	}
	src := newFakeSource()
	src.stored = &config.Workload{Connectors: []config.Connector{{Name: "beta", Tasks: 2,
		Run: &config.Process{Command: []string{"sleep"}}, Task: &config.Process{Command: []string{"sleep"}}}}}
	a := New(cfg, path, Options{Source: src})
	a.desired = source.Desired{Workload: &config.Workload{}} // its own share: empty
	ws := a.warnDeclarations(context.Background(), true)
	var got []string
	for _, w := range ws {
		got = append(got, w.Error())
	}
	if len(ws) != 1 || !strings.Contains(got[0], `"gamma"`) {
		t.Fatalf("warnings %q, want exactly one, naming gamma (beta and beta-1 are in the store)", got)
	}
}
