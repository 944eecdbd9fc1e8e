package supervisor

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
)

// startAgent runs an agent in this process on the given connectors and
// waits until it is ready. The agent is stopped in cleanup.
func startAgent(tb testing.TB, body string) *Agent {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: the agent makes cgroups")
	}
	dir := tb.TempDir()
	root := testutil.TrackCgroupRoot(tb, fmt.Sprintf("berth-sv-%s-%d", strings.ToLower(strings.ReplaceAll(tb.Name(), "/", "-")), time.Now().UnixNano()))
	cfgText := fmt.Sprintf("[agent]\nid = \"sv\"\ndata_dir = %q\nlog_dir = %q\nlisten = \"127.0.0.1:0\"\ncgroup_root = %q\nstop_timeout = \"1s\"\n%s",
		filepath.Join(dir, "data"), filepath.Join(dir, "log"), root, body)
	path := filepath.Join(dir, "berth.toml")
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Load(path, host.Local())
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
	case <-time.After(60 * time.Second):
		tb.Fatal("agent not ready after 60s")
	}
	return a
}

// BenchmarkScrape100Jobs measures one /metrics scrape (cgroup and procfs
// collectors, exposition) with 100 running jobs of one process each.
func BenchmarkScrape100Jobs(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("[static]\nconnectors = [")
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&sb, "%q,", fmt.Sprintf("j%03d", i))
	}
	sb.WriteString("]\n")
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&sb, "[[connector]]\nname = \"j%03d\"\n[connector.run]\ncommand = [\"sleep\", \"infinity\"]\nlimits = { memory = \"16MiB\", pids = 8 }\n", i)
	}
	a := startAgent(b, sb.String())
	deadline := time.Now().Add(60 * time.Second)
	for {
		running := 0
		for _, j := range a.Jobs() {
			if j.State == worker.Running {
				running++
			}
		}
		if running == 100 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of 100 jobs running", running)
		}
		time.Sleep(50 * time.Millisecond)
	}
	h := a.Handler()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			b.Fatalf("scrape: %d", rec.Code)
		}
		_, _ = io.Copy(io.Discard, rec.Body)
	}
}
