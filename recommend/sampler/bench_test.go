package sampler

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/berthd/berth/recommend"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// benchJobs makes n limited job cgroups (0.1 core, 64 MiB: a quota, so
// that v1 cpu.stat is read too) and a sampler over them.
func benchJobs(b *testing.B, n int) *Sampler {
	h := hierarchy(b)
	res := &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: new(int64(10000)), Period: new(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: new(int64(64 << 20))},
	}
	js := &jobs{}
	for i := range n {
		id := fmt.Sprintf("bench-%04d", i)
		g, err := h.New("jobs/"+id, res)
		if err != nil {
			b.Fatal(err)
		}
		js.running = append(js.running, Job{ID: id, Group: g})
	}
	m, err := recommend.New(recommend.DefaultParams())
	if err != nil {
		b.Fatal(err)
	}
	return New(Options{Model: m, Path: filepath.Join(b.TempDir(), recommend.FileName), Jobs: js})
}

// BenchmarkTick1000Jobs is one tick of the sampler at 1,000 jobs: every
// job's CPU counters and a fifteenth of the jobs' memory figures and
// pressure, into the model. One tick a second: its time per op is the
// sampler's CPU time per second.
func BenchmarkTick1000Jobs(b *testing.B) {
	s := benchJobs(b, 1000)
	s.sample() // the groups' directories found once, as in the agent
	b.ReportAllocs()
	for b.Loop() {
		s.sample()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/job")
}

// BenchmarkMemorySample is one job's memory sample (MemorySample,
// Pressure, the model), which the sampler takes every 15 s.
func BenchmarkMemorySample(b *testing.B) {
	s := benchJobs(b, 1)
	j := s.opts.Jobs.Running(nil)[0]
	b.ReportAllocs()
	for b.Loop() {
		s.sampleMemory(j)
	}
}

// BenchmarkCPUSample is one job's CPU sample (CPUCounters and the model),
// which the sampler takes every second.
func BenchmarkCPUSample(b *testing.B) {
	s := benchJobs(b, 1)
	j := s.opts.Jobs.Running(nil)[0]
	b.ReportAllocs()
	for b.Loop() {
		c, err := j.Group.CPUCounters()
		if err != nil {
			b.Fatal(err)
		}
		s.opts.Model.ObserveCPU(j.ID, recommend.CPUSample{UsageSeconds: c.UsageSeconds, QuotaCores: c.QuotaCores})
	}
}
