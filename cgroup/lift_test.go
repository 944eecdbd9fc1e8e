package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// A limit removed from a definition, written in place as the kernel's
// default (limits.Lift), is gone from the cgroup: memory, swap, CPU quota
// and weight, pids (and memory.high and memory.low on v2) read as the
// kernel's defaults, and the kernel no longer enforces the old memory
// limit: a process that was OOM-killed at 64 MiB allocating 96 MiB now
// allocates them, in the same cgroup, under the same shell.
func TestRemovedLimitsLiftedInPlace(t *testing.T) {
	h := testHierarchy(t)
	old := limits.Limits{CPU: 0.5, CPUWeight: 300, Memory: 64 << 20, Pids: 20}
	if h.Mode() == Unified {
		old.MemoryHigh = 48 << 20
		old.MemoryLow = 32 << 20
	}
	prev, _, err := old.Resources(nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := h.New("jobs/lift", prev)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fifo, marks := filepath.Join(dir, "go"), filepath.Join(dir, "marks")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Each line written to the fifo runs one 96 MiB allocation (dd's
	// buffer, filled from /dev/zero) and appends its exit status.
	j := startIn(t, g, fmt.Sprintf(`while read _ < %s; do dd if=/dev/zero of=/dev/null bs=96M count=1 2>/dev/null; echo $? >> %s; done`, fifo, marks))
	pid := j.cmd.Process.Pid
	round := func(n int) string {
		t.Helper()
		if err := os.WriteFile(fifo, []byte("go\n"), 0); err != nil {
			t.Fatal(err)
		}
		var lines []string
		if !testutil.Poll(60*time.Second, func() bool {
			b, _ := os.ReadFile(marks)
			lines = strings.Fields(string(b))
			return len(lines) >= n
		}) {
			t.Fatalf("allocation %d did not finish: %v; stderr %s", n, lines, j.stderr.String())
		}
		return lines[n-1]
	}
	swap, _ := os.ReadFile("/proc/swaps")
	noSwap := strings.Count(string(swap), "\n") <= 1
	if st := round(1); noSwap && st == "0" {
		t.Fatalf("96 MiB allocated under a 64 MiB limit (status %s): the old limit is not enforced, nothing to lift", st)
	}

	next, _, _ := (&limits.Limits{}).Resources(nil)
	if err := g.Update(limits.Lift(prev, next)); err != nil {
		t.Fatal(err)
	}
	if j.exited() {
		t.Fatalf("the shell exited: %v", j.err)
	}
	kills, err := g.OOMKills()
	if err != nil {
		t.Fatal(err)
	}
	if st := round(2); st != "0" {
		t.Errorf("96 MiB allocation after the memory limit was removed: status %s, want 0", st)
	}
	if k, err := g.OOMKills(); err != nil || k != kills {
		t.Errorf("OOM kills %d (%v) after the limit was removed, want %d", k, err, kills)
	}
	if p, _ := g.Pids(); len(p) == 0 || p[0] != pid {
		t.Errorf("processes %v, want the same shell %d", p, pid)
	}

	type want struct{ file, value string }
	var checks []want
	var unl string
	if h.Mode() == Unified {
		d := h.unifiedDir("jobs/lift")
		checks = []want{{"memory.max", "max"}, {"memory.high", "max"}, {"memory.low", "0"}, {"cpu.max", "max 100000"}, {"cpu.weight", "100"}, {"pids.max", "max"}}
		if _, err := os.Stat(filepath.Join(d, "memory.swap.max")); err == nil {
			checks = append(checks, want{"memory.swap.max", "max"})
		}
		for i := range checks {
			checks[i].file = filepath.Join(d, checks[i].file)
		}
	} else {
		unl = readFile(t, filepath.Join(h.v1Dir("memory", ""), "memory.limit_in_bytes")) // the root's: unlimited
		checks = []want{
			{filepath.Join(h.v1Dir("memory", "jobs/lift"), "memory.limit_in_bytes"), unl},
			{filepath.Join(h.v1Dir("cpu", "jobs/lift"), "cpu.cfs_quota_us"), "-1"},
			{filepath.Join(h.v1Dir("cpu", "jobs/lift"), "cpu.shares"), "1024"},
			{filepath.Join(h.v1Dir("pids", "jobs/lift"), "pids.max"), "max"},
		}
		if h.memswAvailable() {
			checks = append(checks, want{filepath.Join(h.v1Dir("memory", "jobs/lift"), "memory.memsw.limit_in_bytes"), unl})
		}
	}
	for _, c := range checks {
		if got := readFile(t, c.file); got != c.value {
			t.Errorf("%s = %q, want the kernel's default %q", c.file, got, c.value)
		}
	}
	u, err := g.FullUsage()
	if err != nil {
		t.Fatal(err)
	}
	if u.Limits != (Limits{}) {
		t.Errorf("usage limits %+v, want none", u.Limits)
	}
}

// An io throttle removed from a definition (limits.Lift: rate 0 for its
// device) is gone from the cgroup: v1 blkio.throttle.*_device lose the
// device's rule; v2 io.max shows no limit for the device.
func TestRemovedIOLimitLiftedInPlace(t *testing.T) {
	h := testHierarchy(t)
	dir, err := os.MkdirTemp("/var/tmp", "berth-io-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	maj, mnr := blockDevice(t, dir)
	dev := specs.LinuxBlockIODevice{Major: maj, Minor: mnr}
	prev := &specs.LinuxResources{BlockIO: &specs.LinuxBlockIO{
		ThrottleReadBpsDevice:   []specs.LinuxThrottleDevice{{LinuxBlockIODevice: dev, Rate: 4 << 20}},
		ThrottleWriteIOPSDevice: []specs.LinuxThrottleDevice{{LinuxBlockIODevice: dev, Rate: 100}},
	}}
	g, err := h.New("jobs/liftio", prev)
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("%d:%d", maj, mnr)
	read := func() string {
		if h.Mode() == Unified {
			for _, line := range strings.Split(readFile(t, filepath.Join(h.unifiedDir("jobs/liftio"), "io.max")), "\n") {
				if strings.HasPrefix(line, key+" ") {
					return line
				}
			}
			return ""
		}
		d := h.v1Dir("blkio", "jobs/liftio")
		return readFile(t, filepath.Join(d, "blkio.throttle.read_bps_device")) + "|" + readFile(t, filepath.Join(d, "blkio.throttle.write_iops_device"))
	}
	before := read()
	if !strings.Contains(before, key) {
		t.Fatalf("throttle not in force before the lift: %q", before)
	}
	// A changed rate on the one kept (write iops) and the read bps removed.
	next := &specs.LinuxResources{BlockIO: &specs.LinuxBlockIO{
		ThrottleWriteIOPSDevice: []specs.LinuxThrottleDevice{{LinuxBlockIODevice: dev, Rate: 200}},
	}}
	if err := g.Update(limits.Lift(prev, next)); err != nil {
		t.Fatal(err)
	}
	if h.Mode() == Unified {
		if got, want := read(), key+" rbps=max wbps=max riops=max wiops=200"; got != want {
			t.Errorf("io.max line %q, want %q", got, want)
		}
	} else if got, want := read(), "|"+key+" 200"; got != want {
		t.Errorf("blkio read_bps|write_iops = %q, want %q", got, want)
	}
	if err := g.Update(limits.Lift(next, nil)); err != nil {
		t.Fatal(err)
	}
	want := "|"
	if h.Mode() == Unified {
		want = ""
	}
	if got := read(); got != want {
		t.Errorf("throttles after every io limit was removed: %q, want %q", got, want)
	}

	// A cgroup an earlier agent wrote: its throttles are read back from
	// the kernel (Throttles) and lifted as the previous value.
	if err := g.Update(prev); err != nil {
		t.Fatal(err)
	}
	loaded, err := h.Load("jobs/liftio")
	if err != nil {
		t.Fatal(err)
	}
	io, err := loaded.Throttles()
	if err != nil {
		t.Fatal(err)
	}
	if io == nil || len(io.ThrottleReadBpsDevice) != 1 || io.ThrottleReadBpsDevice[0] != prev.BlockIO.ThrottleReadBpsDevice[0] ||
		len(io.ThrottleWriteIOPSDevice) != 1 || io.ThrottleWriteIOPSDevice[0] != prev.BlockIO.ThrottleWriteIOPSDevice[0] ||
		len(io.ThrottleWriteBpsDevice)+len(io.ThrottleReadIOPSDevice) != 0 {
		t.Fatalf("Throttles = %+v, want %+v", io, prev.BlockIO)
	}
	if err := loaded.Update(limits.Lift(&specs.LinuxResources{BlockIO: io}, limits.Defaults(nil))); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != want {
		t.Errorf("throttles after the read-back ones were lifted: %q, want %q", got, want)
	}
	if io, err := loaded.Throttles(); err != nil || io != nil {
		t.Errorf("Throttles after the lift = %+v (%v), want none", io, err)
	}
}
