package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/recommend"
	"github.com/berthd/berth/recommend/sampler"
	"github.com/berthd/berth/worker"
)

// The usage history behind berth recommend: one recommend.Model per
// agent, fed by one sampler goroutine (package sampler) from the
// supervisor's view of its running jobs, kept in <data_dir>/usage-history
// across restarts and upgrades, and read by GET /v1/recommendations.

var (
	_ sampler.Jobs    = (*backend)(nil)
	_ api.Recommender = (*backend)(nil)
)

// openUsage returns the agent's usage sampler over b, whose history is
// dataDir's file: the caller reads it (Sampler.Load: a file that cannot
// be read is logged and set aside, the history starts empty) before the
// sampler runs (runUsage) or saves.
func openUsage(dataDir string, b *backend, log *slog.Logger) *sampler.Sampler {
	m, err := recommend.New(recommend.DefaultParams())
	if err != nil {
		panic(fmt.Sprintf("recommend.DefaultParams: %v", err)) // fixed parameters: a bug
	}
	return sampler.New(sampler.Options{Model: m, Path: filepath.Join(dataDir, recommend.FileName), Jobs: b, Log: log})
}

// runUsage runs s, once read is closed (its history read) and ready is
// (the first reconcile has started or adopted every job), until ctx is
// done (it then saves the history) and returns a function that waits for
// it. Each tick reads every running job's cgroup: at thousands of jobs,
// ticks during the first reconcile took a sixth of the agent's CPU from
// the starts and adoptions (BENCHMARKS.md, "Live restart"); the history
// misses those seconds, before any job has a run of its own to measure.
func runUsage(ctx context.Context, s *sampler.Sampler, read, ready <-chan struct{}) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, c := range []<-chan struct{}{read, ready} {
			select {
			case <-c:
			case <-ctx.Done():
				return
			}
		}
		s.Run(ctx)
	}()
	return func() { <-done }
}

// Running implements sampler.Jobs: the jobs whose worker runs, with
// their cgroups and, on cgroup v2, their memory_high.
func (b *backend) Running(buf []sampler.Job) []sampler.Job {
	unified := b.ag.hier != nil && b.ag.hier.Mode() == cgroup.Unified
	for _, j := range b.view().Jobs {
		if j.Group == nil || j.Status.State != worker.Running {
			continue
		}
		var high uint64
		if unified && j.Spec.Process.Limits.MemoryHigh > 0 {
			high = uint64(j.Spec.Process.Limits.MemoryHigh)
		}
		buf = append(buf, sampler.Job{ID: j.Spec.ID, Group: j.Group, HighBytes: high})
	}
	return buf
}

// Defined implements sampler.Jobs: the stored definitions of the
// connectors the IDs may be jobs of (a job's ID is its connector's name,
// or the name and "-<n>" for a task), read by key.
func (b *backend) Defined(ctx context.Context, ids []string) (map[string]bool, error) {
	var names []string
	for _, id := range ids {
		names = append(names, id)
		if i := strings.LastIndexByte(id, '-'); i > 0 {
			if _, err := strconv.Atoi(id[i+1:]); err == nil {
				names = append(names, id[:i])
			}
		}
	}
	wl, err := b.definitions(ctx, names)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, j := range wl.Jobs(0) {
		out[j.ID] = true
	}
	return out, nil
}

// Recommendations implements api.Recommender over the jobs this agent
// has (any state), each job's recommendation computed now for the limits
// of its definition in force.
func (b *backend) Recommendations(jobs, connectors []string) (api.Recommendations, error) {
	host := recommend.Host{CPUs: b.ag.host.NumCPU(), MemoryHigh: b.ag.hier != nil && b.ag.hier.Mode() == cgroup.Unified}
	out := api.Recommendations{Host: host, Jobs: []api.JobRecommendation{}}
	<-b.ag.usageRead
	m := b.ag.usage.Model()
	now := time.Now()
	all := len(jobs) == 0 && len(connectors) == 0
	seen := map[string]bool{}
	for _, j := range b.view().Jobs {
		js := j.Spec
		if !all && !slices.Contains(jobs, js.ID) && !slices.Contains(connectors, js.Connector) {
			continue
		}
		seen[js.ID], seen["connector "+js.Connector] = true, true
		jr := api.JobRecommendation{Job: js.ID, Connector: js.Connector, Kind: string(js.Kind), Limits: js.Process.Limits}
		if r, ok := m.Recommend(js.ID, now, js.Process.Limits, host); ok {
			jr.Recommendation = &r
		}
		out.Jobs = append(out.Jobs, jr)
	}
	var missing []string
	for _, id := range jobs {
		if !seen[id] {
			missing = append(missing, "job "+id)
		}
	}
	for _, n := range connectors {
		if !seen["connector "+n] {
			missing = append(missing, "connector "+n)
		}
	}
	if len(missing) > 0 {
		return api.Recommendations{}, fmt.Errorf("%w: this agent runs no %s", api.ErrNotFound, strings.Join(missing, ", no "))
	}
	return out, nil
}
