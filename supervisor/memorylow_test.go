package supervisor

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// TestMemoryLowChangedInPlaceAndLifted: memory_low of a job and of its
// sharing group is memory.low on cgroup v2, changed in place by a reload
// (the job keeps its PID) and back to the kernel's default 0 once a
// reload removes it; on cgroup v1 it is ignored with a note and the job
// runs (memory.soft_limit_in_bytes keeps the kernel's default).
func TestMemoryLowChangedInPlaceAndLifted(t *testing.T) {
	var logs testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	fa := runFakeAgentWith(t, Options{Logger: log})
	fa.hier.SetLogger(log) // where the cgroup package notes a limit it does not enforce
	wl := func(job, group int64) *spec.Workload {
		a := sleeper("a", limits.Limits{MemoryLow: job})
		a.Group = "g"
		return &spec.Workload{Groups: []spec.Group{{Name: "g", Limits: limits.Limits{MemoryLow: group}}}, Connectors: []spec.Connector{a}}
	}
	fa.src.assign(wl(8<<20, 16<<20))
	first := fa.waitJob(t, "a", "a running", running)
	jobRel, groupRel := cgroup.JobRel("a", "g"), cgroup.GroupRel("g")

	if fa.hier.Mode() != cgroup.Unified {
		testutil.Eventually(t, 10*time.Second, "a note that memory.low is not enforced", func() bool {
			return strings.Contains(logs.String(), fmt.Sprintf("memory.low=%d is not enforced on cgroup v1", 8<<20))
		})
		soft := filepath.Join("/sys/fs/cgroup/memory", fa.hier.Root(), jobRel, "memory.soft_limit_in_bytes")
		b, err := os.ReadFile(soft)
		if n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil || n < 1<<62 {
			t.Errorf("%s = %q (%v), want the kernel's default (unlimited)", soft, b, err)
		}
		return
	}
	// kernel reads memory.low of rel from the kernel (a group loaded anew).
	kernel := func(rel string) uint64 {
		g, err := fa.hier.Load(rel)
		if err != nil {
			return 1
		}
		u, err := g.FullUsage()
		if err != nil {
			return 1
		}
		return u.Limits.MemoryLowBytes
	}
	in := func(job, group uint64) func() bool {
		return func() bool { return kernel(jobRel) == job && kernel(groupRel) == group }
	}
	testutil.Eventually(t, 20*time.Second, "memory.low 8 and 16 MiB", in(8<<20, 16<<20))
	fa.src.assign(wl(12<<20, 24<<20))
	testutil.Eventually(t, 20*time.Second, "memory.low 12 and 24 MiB", in(12<<20, 24<<20))
	fa.src.assign(wl(0, 0))
	testutil.Eventually(t, 20*time.Second, "memory.low 0 (lifted)", in(0, 0))
	if j, _ := fa.Job("a"); j.PID != first.PID {
		t.Fatalf("changing memory_low restarted the job: pid %d -> %d", first.PID, j.PID)
	}
}
