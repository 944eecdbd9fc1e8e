package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// needPSI skips unless the kernel keeps pressure stall information
// (/proc/pressure exists: CONFIG_PSI, and psi=1 where it is off by default)
// and the host has a cgroup2 hierarchy to read it per group from.
func needPSI(t *testing.T) {
	t.Helper()
	needCgroups(t)
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		t.Skipf("kernel keeps no PSI (%v): needs CONFIG_PSI and psi=1", err)
	}
	if DetectMode() == Legacy {
		t.Skip("legacy v1 host: no cgroup2 hierarchy holds per-group PSI")
	}
}

// readPressure reads g's pressure, failing the test on error.
func readPressure(t *testing.T, g *Group) Pressure {
	t.Helper()
	p, err := g.Pressure()
	if err != nil {
		t.Fatalf("Pressure: %v", err)
	}
	return p
}

// Two busy loops under a 0.05-core quota stall on CPU: the group's cpu
// "some" total moves, and never goes down. On a hybrid host the quota is
// the v1 controller's and the stall is read from the controller-less
// cgroup2 directory.
func TestPressureCPUStallUnderQuota(t *testing.T) {
	needPSI(t)
	h := testHierarchy(t)
	g, err := h.New("jobs/burn", &specs.LinuxResources{
		CPU: &specs.LinuxCPU{Quota: ptr(int64(5000)), Period: ptr(uint64(100000))},
	})
	if err != nil {
		t.Fatal(err)
	}
	before := readPressure(t, g)
	startIn(t, g, `while :; do :; done & while :; do :; done`)
	last := before
	var err2 error
	if !testutil.Poll(30*time.Second, func() bool {
		p, err := g.Pressure()
		if err != nil {
			err2 = err
			return true
		}
		for _, c := range []struct {
			name      string
			now, prev float64
		}{
			{"cpu some", p.CPU.SomeSeconds, last.CPU.SomeSeconds},
			{"cpu full", p.CPU.FullSeconds, last.CPU.FullSeconds},
			{"memory some", p.Memory.SomeSeconds, last.Memory.SomeSeconds},
			{"io some", p.IO.SomeSeconds, last.IO.SomeSeconds},
		} {
			if c.now < c.prev {
				t.Errorf("%s went down: %v -> %v", c.name, c.prev, c.now)
			}
		}
		last = p
		return p.CPU.SomeSeconds >= before.CPU.SomeSeconds+0.5
	}) {
		t.Fatalf("cpu some stayed at %v s (from %v s) for 30 s of two burners under 0.05 cores", last.CPU.SomeSeconds, before.CPU.SomeSeconds)
	}
	if err2 != nil {
		t.Fatalf("Pressure: %v", err2)
	}
	if !last.CPU.HasFull || !last.Memory.HasFull || !last.IO.HasFull {
		t.Logf("no \"full\" line for some resource (cpu before Linux 5.13): %+v", last)
	}
	t.Logf("after the stall: %+v", last)
}

// memory.high below what the job allocates, with nothing to reclaim (no
// swap, anonymous memory): the kernel throttles the allocator and the
// group's memory "some" and "full" totals move. cgroup v2 only (v1 has no
// memory.high); runs in the v2 VM lane.
func TestPressureMemoryHighStall(t *testing.T) {
	needUnified(t)
	needPSI(t)
	h := testHierarchy(t)
	g, err := h.New("jobs/balloon", &specs.LinuxResources{
		Unified: map[string]string{"memory.high": strconv.Itoa(8 << 20)},
	})
	if err != nil {
		t.Fatal(err)
	}
	before := readPressure(t, g)
	// dd's 48 MiB buffer, filled from /dev/zero, is six times memory.high.
	startIn(t, g, `while :; do dd if=/dev/zero of=/dev/null bs=50331648 count=1 2>/dev/null; done`)
	var last Pressure
	if !testutil.Poll(60*time.Second, func() bool {
		last = readPressure(t, g)
		return last.Memory.SomeSeconds >= before.Memory.SomeSeconds+0.1 && last.Memory.FullSeconds > before.Memory.FullSeconds
	}) {
		t.Fatalf("memory pressure stayed at %+v (from %+v) for 60 s of a 48 MiB buffer under memory.high 8 MiB", last.Memory, before.Memory)
	}
	t.Logf("after the stall: %+v", last)
}

// PSI absent: a host whose kernel keeps none gives ErrNoPressure; on a host
// that keeps it, writing 0 to the group's cgroup.pressure (Linux 6.1) hides
// the files and gives ErrNoPressure too, never zeros; 1 brings them back. A
// deleted group gives ErrNotExist.
func TestPressureAbsent(t *testing.T) {
	needCgroups(t)
	h := testHierarchy(t)
	g, err := h.New("jobs/quiet", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil || h.Mode() == Legacy {
		_, err := g.Pressure()
		if !errors.Is(err, ErrNoPressure) {
			t.Fatalf("Pressure on a host without PSI = %v, want ErrNoPressure", err)
		}
		t.Logf("host without PSI: %v", err)
		return
	}
	if _, err := g.Pressure(); err != nil {
		t.Fatalf("Pressure: %v", err)
	}
	knob := filepath.Join(h.unifiedDir("jobs/quiet"), "cgroup.pressure")
	if _, err := os.Stat(knob); err != nil {
		t.Skipf("no per-cgroup PSI switch (Linux 6.1): %v", err)
	}
	if err := os.WriteFile(knob, []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	_, err = g.Pressure()
	if !errors.Is(err, ErrNoPressure) || errors.Is(err, ErrNotExist) {
		t.Fatalf("Pressure with cgroup.pressure 0 = %v, want ErrNoPressure", err)
	}
	if !strings.Contains(err.Error(), "cpu.pressure") {
		t.Errorf("error %q does not name the missing file", err)
	}
	if err := os.WriteFile(knob, []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Pressure(); err != nil {
		t.Fatalf("Pressure with cgroup.pressure 1 again: %v", err)
	}
	ctx := t.Context()
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Pressure(); !errors.Is(err, ErrNotExist) || errors.Is(err, ErrNoPressure) {
		t.Fatalf("Pressure of a deleted group = %v, want ErrNotExist", err)
	}
}

// The kernel's file format (psi.rst, "Pressure interface") and what is
// refused: a line without total=, a total that is not a number, no "some".
func TestParsePressure(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    StallTime
		wantErr string
	}{
		{in: "some avg10=0.00 avg60=0.00 avg300=0.00 total=1902285\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=943853\n",
			want: StallTime{SomeSeconds: 1.902285, FullSeconds: 0.943853, HasFull: true}},
		{in: "some avg10=1.50 avg60=0.20 avg300=0.01 total=250\n", want: StallTime{SomeSeconds: 0.000250}},
		{in: "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\nnew avg10=1 total=x\n", want: StallTime{SomeSeconds: 0.000005}},
		{in: "some avg10=0.00 avg60=0.00 avg300=0.00\n", wantErr: "no total="},
		{in: "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n", wantErr: "not a number"},
		{in: "full avg10=0.00 avg60=0.00 avg300=0.00 total=1\n", wantErr: `no "some" line`},
		{in: "", wantErr: `no "some" line`},
	} {
		got, err := parsePressure([]byte(c.in))
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("parsePressure(%q) = %+v, %v; want error with %q", c.in, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parsePressure(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}
