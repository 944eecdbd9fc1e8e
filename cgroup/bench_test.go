package cgroup

import (
	"context"
	"fmt"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// BenchmarkNewDelete creates one limited job cgroup (0.5 CPU, 256 MiB, swap
// off, 64 pids) in every hierarchy and deletes it.
func BenchmarkNewDelete(b *testing.B) {
	h := testHierarchy(b)
	res := &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: ptr(int64(50000)), Period: ptr(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: ptr(int64(256 << 20)), Swap: ptr(int64(256 << 20))},
		Pids:   &specs.LinuxPids{Limit: ptr(int64(64))},
	}
	newDeleteLoop(b, h, res)
}

// BenchmarkUsage reads one busy job's usage and limits as the metrics
// scrape does for every job (the hot path at thousands of jobs).
func BenchmarkUsage(b *testing.B) {
	h := testHierarchy(b)
	g, err := h.New("jobs/bench-usage", &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: ptr(int64(50000)), Period: ptr(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: ptr(int64(256 << 20))},
		Pids:   &specs.LinuxPids{Limit: ptr(int64(64))},
	})
	if err != nil {
		b.Fatal(err)
	}
	startIn(b, g, "sleep 1000")
	for b.Loop() {
		if _, err := g.Usage(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewAmong2000 is BenchmarkNewDelete with 2,000 limited job
// cgroups already made beside it, as at a start of thousands of jobs: the
// kernel's cost of some writes (v1 cpuset.cpus, cpu.cfs_period_us and
// cpu.cfs_quota_us) grows with the number of cgroups.
func BenchmarkNewAmong2000(b *testing.B) {
	h := testHierarchy(b)
	res := &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: ptr(int64(10000)), Period: ptr(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: ptr(int64(16 << 20)), Swap: ptr(int64(16 << 20))},
		Pids:   &specs.LinuxPids{Limit: ptr(int64(4))},
	}
	for i := range 2000 {
		if _, err := h.New(fmt.Sprintf("jobs/sibling-%d", i), res); err != nil {
			b.Fatal(err)
		}
	}
	newDeleteLoop(b, h, res)
}

// newDeleteLoop makes and deletes one limited job cgroup per iteration.
func newDeleteLoop(b *testing.B, h *Hierarchy, res *specs.LinuxResources) {
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		g, err := h.New(fmt.Sprintf("jobs/bench-%d", i), res)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Delete(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
