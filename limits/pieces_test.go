package limits

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Each resource set becomes one piece holding it alone, in a fixed order;
// a resource not set gives none.
func TestPieces(t *testing.T) {
	mem, pids := int64(64<<20), int64(10)
	res := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem}, Pids: &specs.LinuxPids{Limit: &pids}}
	ps := Pieces(res)
	if len(ps) != 2 || ps[0].Key != "memory" || ps[1].Key != "pids" {
		t.Fatalf("pieces %+v, want memory then pids", ps)
	}
	if ps[0].Resources.Pids != nil || ps[0].Resources.Memory != res.Memory {
		t.Errorf("memory piece %+v holds more or less than memory", ps[0].Resources)
	}
	if ps[1].Resources.Memory != nil || ps[1].Resources.Pids != res.Pids {
		t.Errorf("pids piece %+v holds more or less than pids", ps[1].Resources)
	}
	if n := len(Pieces(&specs.LinuxResources{})); n != 0 {
		t.Errorf("%d pieces of nothing", n)
	}
}
