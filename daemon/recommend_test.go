package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/recommend/sampler"
)

// The usage history's view of the agent: the running jobs are sampled
// and their recommendations served, by job and by connector (its own job
// and its tasks); a name that is nothing here is ErrNotFound; the jobs
// still defined are told from those deleted, task numbers included.
func TestRecommendationsOfTheAgentsJobs(t *testing.T) {
	a := runAgent(t, `[static]
connectors = ["a", "x-1"]
tasks = ["a-0", "a-1"]

[[connector]]
name = "a"
tasks = 2
  [connector.run]
  command = ["sleep", "1000"]
  [connector.task]
  command = ["sleep", "1000"]

[[connector]]
name = "x-1"
  [connector.run]
  command = ["sleep", "1000"]
`)
	b := a.backend
	testutil.Eventually(t, 30*time.Second, "every job sampled", func() bool {
		rs, err := b.Recommendations(nil, nil)
		if err != nil || len(rs.Jobs) != 4 {
			return false
		}
		for _, j := range rs.Jobs {
			if j.Recommendation == nil || j.Recommendation.Evidence.CPUSamples == 0 {
				return false
			}
		}
		return true
	})
	rs, err := b.Recommendations([]string{"x-1"}, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range rs.Jobs {
		ids = append(ids, j.Job)
	}
	if !slices.Equal(ids, []string{"a", "a-0", "a-1", "x-1"}) || rs.Host.CPUs == 0 {
		t.Errorf("jobs %v on %+v; want a, a-0, a-1, x-1 on a host with CPUs", ids, rs.Host)
	}
	if _, err := b.Recommendations([]string{"a-7"}, []string{"nope"}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("unknown names: %v, want ErrNotFound", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defined, err := b.Defined(ctx, []string{"a", "a-0", "a-1", "a-2", "x-1", "x-0", "gone", "gone-0"})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(defined)); !slices.Equal(got, []string{"a", "a-0", "a-1", "x-1"}) {
		t.Errorf("defined %v; want a, a-0, a-1, x-1", got)
	}
}

// BenchmarkRunning100Jobs is the sampler's list of running jobs from the
// supervisor's view (backend.Running), once a tick, at 100 running jobs.
func BenchmarkRunning100Jobs(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("[static]\nconnectors = [")
	for i := range 100 {
		fmt.Fprintf(&sb, "%q,", fmt.Sprintf("j%03d", i))
	}
	sb.WriteString("]\n")
	for i := range 100 {
		fmt.Fprintf(&sb, "[[connector]]\nname = \"j%03d\"\n[connector.run]\ncommand = [\"sleep\", \"infinity\"]\n", i)
	}
	a := runAgent(b, sb.String())
	var buf []sampler.Job
	testutil.Eventually(b, 60*time.Second, "100 jobs running", func() bool {
		buf = a.backend.Running(buf[:0])
		return len(buf) == 100
	})
	b.ReportAllocs()
	for b.Loop() {
		buf = a.backend.Running(buf[:0])
	}
}
