package memwatch

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/berthd/berth/cgroup"
)

// mapEntry is the bytes of one entry of Watcher.handles (key, value and a
// slot's share of a swiss-table group's control word).
const mapEntry = 8 + 8 + 1

// psimonThreads counts the kernel's PSI real-time polling threads
// ("psimon", one per cgroup with a privileged trigger).
func psimonThreads() int {
	n := 0
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range comms {
		if b, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(b)) == "psimon" {
			n++
		}
	}
	return n
}

// The cost of watching 64 jobs, per mechanism this host has: exactly one
// descriptor per job and no goroutine (asserted: they are the design),
// and, reported for BENCHMARKS.md, the agent's heap bytes per watch, the
// time of a Watch and of a Close, and the kernel threads the watches made.
func TestCostPerJob(t *testing.T) {
	needCgroups(t)
	h := testHierarchy(t)
	const n = 64
	var groups []*cgroup.Group
	for i := range n {
		groups = append(groups, newJob(t, h, fmt.Sprintf("cost-%d", i), memoryLimit(64<<20)))
	}
	mechs := map[Mechanism]func(g *cgroup.Group) (Target, Rule){}
	if m := h.Mode(); m == cgroup.Legacy || m == cgroup.Hybrid {
		mechs[Threshold] = func(g *cgroup.Group) (Target, Rule) { return TargetOf(g), Rule{High: 32 << 20} }
	}
	if _, err := os.Stat("/proc/pressure/memory"); err == nil && h.Mode() != cgroup.Legacy {
		mechs[PSI] = func(g *cgroup.Group) (Target, Rule) {
			return Target{PressureFile: TargetOf(g).PressureFile}, Rule{Limit: 40, Duration: 30 * time.Second}
		}
	}
	if len(mechs) == 0 {
		t.Skip("neither a v1 memory controller nor PSI")
	}
	for mech, target := range mechs {
		t.Run(mech.String(), func(t *testing.T) {
			w := newWatcher(t)
			type watch struct {
				t Target
				r Rule
			}
			var watches []watch
			for _, g := range groups {
				tgt, r := target(g)
				watches = append(watches, watch{tgt, r})
			}
			fds, gs, kthreads := openFDs(t), runtime.NumGoroutine(), psimonThreads()
			handles := make([]*Handle, 0, n)
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			alloc := ms.TotalAlloc
			start := time.Now()
			for _, wt := range watches {
				hd, err := w.Watch(wt.t, wt.r)
				if err != nil {
					t.Fatal(err)
				}
				handles = append(handles, hd)
			}
			took := time.Since(start)
			runtime.ReadMemStats(&ms)
			allocated := (ms.TotalAlloc - alloc) / n
			kept := unsafe.Sizeof(Handle{}) + uintptr(len(handles[0].thr.dir)+len(handles[0].thr.usageFile)) + mapEntry
			if d := openFDs(t) - fds; d != n {
				t.Errorf("%d watches hold %d descriptors, want %d", n, d, n)
			}
			if d := runtime.NumGoroutine() - gs; d != 0 {
				t.Errorf("%d watches started %d goroutines, want 0", n, d)
			}
			t.Logf("%s: per job: 1 descriptor, 0 goroutines, %d bytes kept (the Handle, its paths, its map entry), %d bytes allocated by Watch, %.3f kernel threads (psimon); Watch %v; privileged trigger %v",
				mech, kept, allocated, float64(psimonThreads()-kthreads)/n, (took / n).Round(time.Microsecond), w.privileged)
			start = time.Now()
			for _, hd := range handles[:n/2] {
				hd.Close()
			}
			one := time.Since(start) / (n / 2)
			start = time.Now()
			w.Close()
			t.Logf("%s: Handle.Close %v each, one after another; Watcher.Close of %d watches %v", mech, one.Round(time.Microsecond), n-n/2, time.Since(start).Round(time.Microsecond))
			if d := openFDs(t) - (fds - 2); d != 0 { // less the watcher's epoll set and eventfd
				t.Errorf("%d descriptors left after the watcher was closed", d)
			}
		})
	}
}
