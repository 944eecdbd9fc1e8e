package limits

import (
	"testing"
)

// fixedDevice resolves every io device to 8:0.
func fixedDevice(string) (Device, error) { return Device{Major: 8, Minor: 0}, nil }

func TestLiftWritesTheDefaultOfEachRemovedLimit(t *testing.T) {
	old := Limits{CPU: 0.5, CPUPeriod: 50e6, CPUWeight: 300, Memory: 64 << 20, MemoryHigh: 48 << 20, MemoryLow: 32 << 20, MemorySwap: 16 << 20, Pids: 50, IOWeight: 200,
		IO: []IOLimit{{Device: "/dev/sda", ReadBPS: 1 << 20, WriteIOPS: 100}}}
	prev, _, err := old.Resources(fixedDevice)
	if err != nil {
		t.Fatal(err)
	}
	next, _, err := (&Limits{}).Resources(fixedDevice)
	if err != nil {
		t.Fatal(err)
	}
	r := Lift(prev, next)
	if r.Memory == nil || *r.Memory.Limit != -1 || *r.Memory.Swap != -1 || *r.Memory.Reservation != 0 {
		t.Errorf("memory %+v, want limit and swap -1, reservation (memory.low) 0", r.Memory)
	}
	if r.CPU == nil || *r.CPU.Quota != -1 || *r.CPU.Period != 50000 || *r.CPU.Shares != 1024 {
		t.Errorf("cpu %+v, want quota -1 over the old period 50000, shares 1024", r.CPU)
	}
	if r.Pids == nil || *r.Pids.Limit != -1 {
		t.Errorf("pids %+v, want -1", r.Pids)
	}
	want := map[string]string{UnifiedMemoryHigh: "max", UnifiedCPUWeight: "100", UnifiedIOWeight: "default 100"}
	for k, v := range want {
		if r.Unified[k] != v {
			t.Errorf("unified %s = %q, want %q", k, r.Unified[k], v)
		}
	}
	b := r.BlockIO
	if b == nil || *b.Weight != IOWeightToBlkioWeight(100) {
		t.Fatalf("blkio %+v, want the weight of io_weight 100", b)
	}
	if len(b.ThrottleReadBpsDevice) != 1 || b.ThrottleReadBpsDevice[0].Rate != 0 || b.ThrottleReadBpsDevice[0].Major != 8 ||
		len(b.ThrottleWriteIOPSDevice) != 1 || b.ThrottleWriteIOPSDevice[0].Rate != 0 ||
		len(b.ThrottleWriteBpsDevice) != 0 || len(b.ThrottleReadIOPSDevice) != 0 {
		t.Errorf("throttles %+v, want rate 0 on 8:0 for read bps and write iops only", b)
	}
	if next.Memory != nil || next.CPU != nil || next.Unified != nil || next.BlockIO != nil {
		t.Errorf("Lift changed its argument: %+v", next)
	}
}

func TestLiftKeepsWhatTheNewDefinitionSets(t *testing.T) {
	prev, _, _ := (&Limits{Memory: 64 << 20, Pids: 50, CPU: 1, IO: []IOLimit{{Device: "x", ReadBPS: 5, WriteBPS: 6}}}).Resources(fixedDevice)
	next, _, _ := (&Limits{Memory: 32 << 20, CPUWeight: 200, IO: []IOLimit{{Device: "x", ReadBPS: 7}}}).Resources(fixedDevice)
	r := Lift(prev, next)
	if *r.Memory.Limit != 32<<20 || *r.Memory.Swap != 32<<20 {
		t.Errorf("memory %+v, want the new 32 MiB", r.Memory)
	}
	if *r.Pids.Limit != -1 || *r.CPU.Quota != -1 || *r.CPU.Shares != CPUWeightToShares(200) || r.Unified[UnifiedCPUWeight] != "200" {
		t.Errorf("pids %+v cpu %+v unified %v", r.Pids, r.CPU, r.Unified)
	}
	if rb := r.BlockIO.ThrottleReadBpsDevice; len(rb) != 1 || rb[0].Rate != 7 {
		t.Errorf("read bps %+v, want the new 7 only", rb)
	}
	if wb := r.BlockIO.ThrottleWriteBpsDevice; len(wb) != 1 || wb[0].Rate != 0 {
		t.Errorf("write bps %+v, want lifted (rate 0)", wb)
	}
	same := Lift(next, next)
	if same.Memory != next.Memory || same.Pids != nil || *same.CPU.Shares != *next.CPU.Shares {
		t.Errorf("Lift of an unchanged definition added something: %+v", same)
	}
	if Lift(nil, next) != next {
		t.Error("Lift(nil, next) is not next")
	}
}

func TestDefaultsFillsWhatIsUnset(t *testing.T) {
	next, _, _ := (&Limits{Memory: 32 << 20}).Resources(fixedDevice)
	r := Defaults(next)
	if *r.Memory.Limit != 32<<20 || *r.Memory.Reservation != 0 || *r.Pids.Limit != -1 || *r.CPU.Quota != -1 || r.CPU.Period != nil || *r.CPU.Shares != 1024 ||
		r.Unified[UnifiedMemoryHigh] != "max" || r.Unified[UnifiedCPUWeight] != "100" {
		t.Errorf("defaults %+v cpu %+v unified %v", r, r.CPU, r.Unified)
	}
	if r.BlockIO != nil || r.Unified[UnifiedIOWeight] != "" || r.CPU.Cpus != "" {
		t.Errorf("defaults wrote an io limit or a cpuset: %+v %v", r.BlockIO, r.Unified)
	}
}

// memory_low is runtime-spec's memory reservation (memory.low on v2),
// kept by Lift when the next definition sets it, and left alone by Lift
// and Defaults when it is set.
func TestMemoryLowIsTheReservation(t *testing.T) {
	r, _, err := (&Limits{MemoryLow: 16 << 20}).Resources(fixedDevice)
	if err != nil || r.Memory == nil || *r.Memory.Reservation != 16<<20 || r.Memory.Limit != nil || r.Memory.Swap != nil || r.Unified != nil {
		t.Fatalf("resources %+v, %v; want only the reservation", r.Memory, err)
	}
	prev, _, _ := (&Limits{MemoryLow: 8 << 20, Memory: 64 << 20}).Resources(fixedDevice)
	if l := Lift(prev, r); *l.Memory.Reservation != 16<<20 || *l.Memory.Limit != -1 {
		t.Errorf("lift %+v, want the new reservation and the memory limit lifted", l.Memory)
	}
	if d := Defaults(r); *d.Memory.Reservation != 16<<20 {
		t.Errorf("defaults %+v, want the reservation kept", d.Memory)
	}
	if *r.Memory.Reservation != 16<<20 || r.Memory.Limit != nil {
		t.Errorf("Lift or Defaults changed their argument: %+v", r.Memory)
	}
}

func TestCpusetRemoved(t *testing.T) {
	if !CpusetRemoved(Limits{Cpuset: "0"}, Limits{}) || CpusetRemoved(Limits{Memory: 1}, Limits{}) || CpusetRemoved(Limits{Cpuset: "0"}, Limits{Cpuset: "1"}) {
		t.Error("CpusetRemoved")
	}
}
