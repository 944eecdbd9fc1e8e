package limits

import specs "github.com/opencontainers/runtime-spec/specs-go"

// Piece is one resource of a LinuxResources, alone: what can be written to
// a cgroup on its own so that a value the kernel refuses keeps no other
// resource out (a nil resource is left as it is by a cgroup update).
type Piece struct {
	// Key is the limits key the resource comes from: memory, cpu, pids,
	// io, hugepages, devices or unified.
	Key string
	// Value is the runtime-spec value, for reports.
	Value any
	// Resources holds this resource only.
	Resources *specs.LinuxResources
}

// Pieces splits res into one Piece per resource it sets, in a fixed order.
func Pieces(res *specs.LinuxResources) []Piece {
	var out []Piece
	add := func(key string, v any, set bool, r specs.LinuxResources) {
		if set {
			out = append(out, Piece{key, v, &r})
		}
	}
	add("memory", res.Memory, res.Memory != nil, specs.LinuxResources{Memory: res.Memory})
	add("cpu", res.CPU, res.CPU != nil, specs.LinuxResources{CPU: res.CPU})
	add("pids", res.Pids, res.Pids != nil, specs.LinuxResources{Pids: res.Pids})
	add("io", res.BlockIO, res.BlockIO != nil, specs.LinuxResources{BlockIO: res.BlockIO})
	add("hugepages", res.HugepageLimits, res.HugepageLimits != nil, specs.LinuxResources{HugepageLimits: res.HugepageLimits})
	add("devices", res.Devices, res.Devices != nil, specs.LinuxResources{Devices: res.Devices})
	add("unified", res.Unified, res.Unified != nil, specs.LinuxResources{Unified: res.Unified})
	return out
}
