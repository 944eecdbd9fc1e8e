package cgroup

import (
	"os"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Applied is what New and Update wrote, as the kernel holds it (the memory
// limit in whole pages), and agrees with what Stats reads back; Usage
// reads the same counters Stats does, from fewer files.
func TestAppliedAndUsage(t *testing.T) {
	h := testHierarchy(t)
	mem := int64(64<<20 + 100) // not a whole number of pages
	g, err := h.New("jobs/usage", &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: ptr(int64(50000)), Period: ptr(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: &mem},
		Pids:   &specs.LinuxPids{Limit: ptr(int64(16))},
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(want Applied) {
		t.Helper()
		a := g.Applied()
		if a.CPUQuotaCores != want.CPUQuotaCores || a.MemoryLimitBytes != want.MemoryLimitBytes || a.PidsLimit != want.PidsLimit {
			t.Errorf("Applied = %+v, want %+v", a, want)
		}
		s, err := g.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if s.CPUQuotaCores != a.CPUQuotaCores || s.MemoryLimitBytes != a.MemoryLimitBytes || s.PidsLimit != a.PidsLimit {
			t.Errorf("the kernel holds cpu %v, memory %d, pids %d; Applied says %+v", s.CPUQuotaCores, s.MemoryLimitBytes, s.PidsLimit, a)
		}
	}
	page := uint64(os.Getpagesize())
	check(Applied{CPUQuotaCores: 0.5, MemoryLimitBytes: uint64(mem) / page * page, PidsLimit: 16})
	// An update of the memory limit alone leaves the others as they were.
	mem2 := int64(32 << 20)
	if err := g.Update(&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem2}}); err != nil {
		t.Fatal(err)
	}
	check(Applied{CPUQuotaCores: 0.5, MemoryLimitBytes: 32 << 20, PidsLimit: 16})

	startIn(t, g, "while :; do :; done")
	var u Usage
	if !testutil.Poll(10*time.Second, func() bool {
		u, err = g.Usage()
		return err == nil && u.CPUUserSeconds+u.CPUSystemSeconds > 0.05 && u.Pids >= 1 && u.MemoryBytes > 0
	}) {
		t.Fatalf("Usage = %+v, %v: no CPU time, task or memory accounted for a busy loop", u, err)
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if u.Pids != s.Pids || u.OOMKills != s.OOMKills {
		t.Errorf("Usage %+v and Stats %+v disagree on pids or OOM kills", u, s)
	}
	if s.CPUUserSeconds+s.CPUSystemSeconds <= 0 {
		t.Errorf("Stats has no CPU time: %+v", s)
	}
	if err := g.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Usage(); err == nil {
		t.Error("Usage of a deleted group: no error")
	}
}

// The scrape's parser of flat keyed files and numbers, on contents in the
// shapes the kernel writes (Documentation/admin-guide/cgroup-v2.rst
// "Interface Files"; v1 memory.oom_control): a key is matched whole, the
// last line may lack its newline, "max" reads as 0, and anything else that
// is not a decimal number is an error. Runs without root.
func TestKeyedValueFixtures(t *testing.T) {
	events := []byte("low 0\nhigh 12\nmax 40\noom 3\noom_kill 2\noom_group_kill 0")
	for _, c := range []struct {
		key   string
		want  uint64
		found bool
	}{
		{"oom", 3, true}, // not oom_kill, not oom_group_kill
		{"oom_kill", 2, true},
		{"oom_group_kill", 0, true},
		{"low", 0, true},
		{"oom_k", 0, false},
		{"absent", 0, false},
	} {
		v, found, err := keyedValue(events, c.key)
		if err != nil || v != c.want || found != c.found {
			t.Errorf("keyedValue(memory.events, %q) = %d, %v, %v; want %d, %v, nil", c.key, v, found, err, c.want, c.found)
		}
	}
	if _, _, err := keyedValue([]byte("usage_usec many\n"), "usage_usec"); err == nil {
		t.Error("keyedValue of a value that is not a number: no error")
	}
	for _, c := range []struct {
		text    string
		want    uint64
		wantErr bool
	}{
		{"1048576\n", 1048576, false},
		{"max\n", 0, false},
		{" 7 ", 7, false},
		{"18446744073709551615", 1<<64 - 1, false},
		{"18446744073709551616", 0, true},
		{"-1", 0, true},
		{"12 34", 0, true},
		{"", 0, true},
	} {
		v, err := parseUint([]byte(c.text))
		if (err != nil) != c.wantErr || v != c.want {
			t.Errorf("parseUint(%q) = %d, %v; want %d, error %v", c.text, v, err, c.want, c.wantErr)
		}
	}
}
