package limits

import (
	"errors"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
)

func TestQuotaRounding(t *testing.T) {
	cases := []struct {
		cores  float64
		period time.Duration
		want   int64
	}{
		{0.333, 0, 33300},
		{0.1, 0, 10000},
		{1.5, 0, 150000},
		{0.333, 10 * time.Millisecond, 3330},
		{0.0333, time.Second, 33300},
		{0.12345, 100 * time.Millisecond, 12345},
		{0.123456, 100 * time.Millisecond, 12346}, // nearest µs
		{2, time.Millisecond, 2000},
	}
	for _, c := range cases {
		l := Limits{CPU: c.cores, CPUPeriod: c.period}
		for i := 0; i < 3; i++ { // same in, same out (failure case C6)
			r, _, err := l.Resources(nil)
			if err != nil {
				t.Fatal(err)
			}
			wantPeriod := uint64(100000)
			if c.period != 0 {
				wantPeriod = uint64(c.period.Microseconds())
			}
			if *r.CPU.Quota != c.want || *r.CPU.Period != wantPeriod {
				t.Errorf("cpu %v period %v: quota %d period %d; want %d %d", c.cores, c.period, *r.CPU.Quota, *r.CPU.Period, c.want, wantPeriod)
			}
		}
	}
	// C6: a reload that changes only memory keeps the quota bit for bit.
	a := Limits{CPU: 0.333, Memory: 64 << 20}
	b := Limits{CPU: 0.333, Memory: 128 << 20}
	ra, _, _ := a.Resources(nil)
	rb, _, _ := b.Resources(nil)
	if *ra.CPU.Quota != 33300 || *rb.CPU.Quota != *ra.CPU.Quota {
		t.Errorf("quota before/after reload: %d %d, want 33300 both", *ra.CPU.Quota, *rb.CPU.Quota)
	}
}

func TestCPUWeightToShares(t *testing.T) {
	for w, s := range map[uint64]uint64{1: 2, 100: 1024, 10000: 262144} {
		if got := CPUWeightToShares(w); got != s {
			t.Errorf("CPUWeightToShares(%d) = %d, want %d", w, got, s)
		}
	}
	prev := uint64(0)
	for w := uint64(1); w <= 10000; w++ {
		s := CPUWeightToShares(w)
		if back := cgroup2.ConvertCPUSharesToCgroupV2Value(s); back != w {
			t.Fatalf("weight %d -> shares %d -> weight %d: runc's conversion does not round-trip", w, s, back)
		}
		if s <= prev {
			t.Fatalf("shares not increasing at weight %d: %d after %d", w, s, prev)
		}
		prev = s
	}
}

func TestIOWeightToBlkioWeight(t *testing.T) {
	for w, b := range map[uint64]uint16{1: 10, 100: 20, 10000: 1000, 5000: 505} {
		if got := IOWeightToBlkioWeight(w); got != b {
			t.Errorf("IOWeightToBlkioWeight(%d) = %d, want %d", w, got, b)
		}
	}
	for w := uint64(1); w <= 10000; w++ {
		b := uint64(IOWeightToBlkioWeight(w))
		if back := 1 + (b-10)*9999/990; back < w || b < 10 || b > 1000 {
			t.Fatalf("io.weight %d -> blkio.weight %d -> %d", w, b, back)
		}
	}
}

func TestResources(t *testing.T) {
	resolve := func(path string) (Device, error) {
		if path == "/bad" {
			return Device{}, errors.New("no such device")
		}
		return Device{Major: 7, Minor: 0, Path: path, Note: "partition " + path + " resolved to disk loop0 (7:0)"}, nil
	}
	l := Limits{CPU: 1.5, CPUWeight: 100, Cpuset: "0-1", Memory: 512 << 20, MemoryHigh: 448 << 20, Pids: 128, IOWeight: 100,
		IO: []IOLimit{{Device: "/dev/loop0p1", ReadBPS: 50 << 20, WriteIOPS: 500}}}
	r, notes, err := l.Resources(resolve)
	if err != nil {
		t.Fatal(err)
	}
	if *r.CPU.Quota != 150000 || *r.CPU.Period != 100000 || *r.CPU.Shares != 1024 || r.CPU.Cpus != "0-1" {
		t.Errorf("cpu = %+v", r.CPU)
	}
	if *r.Memory.Limit != 512<<20 || *r.Memory.Swap != 512<<20 {
		t.Errorf("memory limit %d swap %d, want swap == limit (swap off)", *r.Memory.Limit, *r.Memory.Swap)
	}
	if *r.Pids.Limit != 128 || *r.BlockIO.Weight != 20 {
		t.Errorf("pids %d blkio weight %d", *r.Pids.Limit, *r.BlockIO.Weight)
	}
	if r.Unified[UnifiedCPUWeight] != "100" || r.Unified[UnifiedMemoryHigh] != "469762048" || r.Unified[UnifiedIOWeight] != "default 100" {
		t.Errorf("unified = %v", r.Unified)
	}
	rd, wi := r.BlockIO.ThrottleReadBpsDevice, r.BlockIO.ThrottleWriteIOPSDevice
	if len(rd) != 1 || rd[0].Major != 7 || rd[0].Minor != 0 || rd[0].Rate != 50<<20 || len(wi) != 1 || wi[0].Rate != 500 ||
		len(r.BlockIO.ThrottleWriteBpsDevice) != 0 || len(r.BlockIO.ThrottleReadIOPSDevice) != 0 {
		t.Errorf("blkio = %+v", r.BlockIO)
	}
	if len(notes) != 1 || notes[0] != "partition /dev/loop0p1 resolved to disk loop0 (7:0)" {
		t.Errorf("notes = %q", notes)
	}

	l = Limits{Memory: 64 << 20, MemorySwap: 32 << 20}
	r, _, _ = l.Resources(resolve)
	if *r.Memory.Swap != 96<<20 || r.CPU != nil || r.Pids != nil || r.BlockIO != nil || r.Unified != nil {
		t.Errorf("memory+swap = %+v", r)
	}
	if r, _, _ := (&Limits{}).Resources(resolve); r.CPU != nil || r.Memory != nil {
		t.Errorf("empty limits set resources: %+v", r)
	}
	if _, _, err := (&Limits{IO: []IOLimit{{Device: "/bad", ReadIOPS: 1}}}).Resources(resolve); err == nil {
		t.Error("unresolvable device: no error")
	}
}
