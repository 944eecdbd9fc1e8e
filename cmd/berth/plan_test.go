package main

import (
	"testing"
	"time"

	"github.com/berthd/berth/limits"
)

// berth validate's plan shows each limit as the kernel gets it: CPU,
// MEMORY, PIDS and IO in their columns, every other limit of the table of
// limits as key=value in OTHER, with the swap beside a memory limit.
func TestLimitCells(t *testing.T) {
	l := limits.Limits{CPU: 1.5, CPUPeriod: 50 * time.Millisecond, CPUWeight: 200, Cpuset: "0", Memory: 512 << 20,
		MemoryHigh: 448 << 20, MemoryLow: 256 << 20, MemorySwap: 1 << 20, Pids: 64, IOWeight: 300,
		IO: []limits.IOLimit{{Device: "/", ReadBPS: 10 << 20}, {Device: "/", WriteBPS: 100, WriteIOPS: 7}}}
	resolve := func(string) (limits.Device, error) { return limits.Device{Major: 254}, nil }
	cpu, mem, pids, iol, other := limitCells(l, resolve)
	for _, c := range []struct{ name, got, want string }{
		{"CPU", cpu, "1.5 cores = 75000/50000 µs"},
		{"MEMORY", mem, "536870912 B (512.0MiB)"},
		{"PIDS", pids, "64"},
		{"IO", iol, "/=254:0 rbps 10485760 B/s; /=254:0 wbps 100 B/s wiops 7"},
		{"OTHER", other, "cpu_weight=200 cpuset=0 io_weight=300 memory_high=469762048 memory_low=268435456 swap=1048576"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	cpu, mem, pids, iol, other = limitCells(limits.Limits{MemoryLow: 1 << 20}, nil)
	if cpu != "-" || mem != "-" || pids != "-" || iol != "-" || other != "memory_low=1048576" {
		t.Errorf("memory_low alone: %q %q %q %q %q", cpu, mem, pids, iol, other)
	}
}
