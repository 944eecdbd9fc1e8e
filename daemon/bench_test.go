package daemon

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/worker"
)

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
	a := runAgent(b, sb.String())
	deadline := time.Now().Add(60 * time.Second)
	for {
		running := 0
		for _, j := range a.backend.Jobs() {
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
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Host = "127.0.0.1" // an IP literal: httptest's example.com is refused (421)
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("scrape: %d", rec.Code)
		}
		_, _ = io.Copy(io.Discard, rec.Body)
	}
}
