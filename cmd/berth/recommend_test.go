package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/recommend"
)

// A name that is a connector of the agent's jobs is a connector (its own
// job and its tasks); any other, a task's ID included, is a job.
func TestRecommendClassifiesNames(t *testing.T) {
	jobs := []api.Job{{ID: "sink", Connector: "sink"}, {ID: "sink-0", Connector: "sink"}, {ID: "src-0", Connector: "src"}}
	ids, conns := classify([]string{"sink", "src-0", "src", "nope"}, jobs)
	if !slices.Equal(ids, []string{"src-0", "nope"}) || !slices.Equal(conns, []string{"sink", "src"}) {
		t.Errorf("jobs %v connectors %v; want [src-0 nope] [sink src]", ids, conns)
	}
}

// berth recommend's output: a comment for a job without samples, then
// Render's tables, which validate in place of the connector's limits; no
// job with samples at all is an error.
func TestRecommendPrints(t *testing.T) {
	m, err := recommend.New(recommend.DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour)
	for i := range 600 {
		at := t0.Add(time.Duration(i) * time.Second)
		m.ObserveCPU("sink-0", recommend.CPUSample{Time: at, UsageSeconds: 0.3 * float64(i)})
		if i%15 == 0 {
			m.ObserveMemory("sink-0", recommend.MemorySample{Time: at, CurrentBytes: 40 << 20, PeakBytes: 48 << 20, Peak: recommend.PeakSinceLastSample})
		}
	}
	cur := limits.Limits{CPU: 1, Memory: 256 << 20, Pids: 64}
	r, ok := m.Recommend("sink-0", time.Now(), cur, recommend.Host{CPUs: 2})
	if !ok {
		t.Fatal("no recommendation")
	}
	recs := api.Recommendations{Host: recommend.Host{CPUs: 2}, Jobs: []api.JobRecommendation{
		{Job: "sink", Connector: "sink", Kind: "connector"},
		{Job: "sink-0", Connector: "sink", Kind: "task", Limits: cur, Recommendation: &r},
	}}
	var out strings.Builder
	if err := printRecommendations(&out, recs, time.Now()); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.HasPrefix(got, "# sink: no usage samples yet") || !strings.Contains(got, "[connector.task.limits]") || !strings.Contains(got, "pids = 64") {
		t.Errorf("output:\n%s", got)
	}
	file := "[[connector]]\nname = \"sink\"\ntasks = 1\n  [connector.task]\n  command = [\"sleep\", \"1\"]\n" + got
	if _, err := config.Parse("berth.toml", []byte(file), host.Local()); err != nil {
		t.Errorf("the output does not validate in place: %v\n%s", err, file)
	}
	recs.Jobs = recs.Jobs[:1]
	if err := printRecommendations(&out, recs, time.Now()); err == nil {
		t.Error("no job with samples: no error")
	}
}
