package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/workload"
)

// runAgent runs a whole agent in this process (embedded etcd, real
// cgroups) on the file made of body below its [agent] table, until the
// test ends.
func runAgent(tb testing.TB, body string) *Agent {
	tb.Helper()
	testutil.NeedRoot(tb)
	dir := tb.TempDir()
	root := testutil.TrackCgroupRoot(tb, fmt.Sprintf("berth-dm-%s-%d", strings.ToLower(strings.ReplaceAll(tb.Name(), "/", "-")), time.Now().UnixNano()))
	text := fmt.Sprintf("[agent]\nid = \"dm\"\ndata_dir = %q\nlog_dir = %q\nlisten = \"127.0.0.1:0\"\ncgroup_root = %q\nstop_timeout = \"1s\"\n%s",
		filepath.Join(dir, "data"), filepath.Join(dir, "log"), root, body)
	path := filepath.Join(dir, "berth.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Load(path, agentTestHost())
	if err != nil {
		tb.Fatal(err)
	}
	a := New(cfg, path, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("agent stop: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		tb.Fatalf("agent exited: %v", err)
	case <-time.After(120 * time.Second):
		tb.Fatal("agent not ready after 120 s")
	}
	return a
}

// [static] declarations are checked against the cluster's store, by name:
// a connector stored by `berth apply` draws no warning, one the store does
// not have either does.
func TestDeclarationsCheckedAgainstTheStore(t *testing.T) {
	a := runAgent(t, "[static]\nconnectors = [\"beta\", \"gamma\"]\ntasks = [\"beta-1\"]\n")
	beta := "[[connector]]\nname = \"beta\"\ntasks = 2\n[connector.run]\ncommand = [\"sleep\", \"1000\"]\n[connector.task]\ncommand = [\"sleep\", \"1000\"]\n"
	defs, err := config.Definitions("beta.toml", []byte(beta), a.host)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := workload.Apply(ctx, a.src.Client().Store, defs, false, a.host); err != nil {
		t.Fatalf("store beta: %v", err)
	}
	ws := a.warnDeclarations(ctx, true)
	var got []string
	for _, w := range ws {
		got = append(got, w.Error())
	}
	if len(ws) != 1 || !strings.Contains(got[0], `"gamma"`) {
		t.Fatalf("warnings %q, want exactly one, naming gamma (beta and beta-1 are in the store)", got)
	}
}
