package memwatch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// stallingJob makes a job's cgroup and returns the pressure file to watch
// and how to start a workload in it that stalls on memory:
//
//   - cgroup v2: a 48 MiB buffer filled over and over under memory.high
//     8 MiB (no swap): the kernel throttles the allocator;
//   - hybrid: a 40 MiB file read through a mapping under a v1 limit of
//     32 MiB: its pages are reclaimed and refault, and the stall shows in
//     the job's directory of the cgroup2 tracking tree (where PSI is kept
//     without controllers). The watch of that file is asked for
//     explicitly: Watch of a hybrid job's TargetOf uses the v1 threshold.
func stallingJob(t testing.TB, h *cgroup.Hierarchy) (Target, func() *workload) {
	t.Helper()
	if h.Mode() == cgroup.Unified {
		g := newJob(t, h, "balloon", &specs.LinuxResources{
			Unified: map[string]string{"memory.high": strconv.Itoa(8 << 20)},
		})
		return TargetOf(g), func() *workload {
			return startIn(t, g, "sh", "-c", "while :; do dd if=/dev/zero of=/dev/null bs=50331648 count=1 2>/dev/null; done")
		}
	}
	g := newJob(t, h, "thrash", memoryLimit(32<<20))
	f, err := os.CreateTemp("/var/tmp", "berth-memwatch-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(f.Name()) })
	if _, err := f.Write(make([]byte, 40<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil { // clean pages: the child drops them from the cache
		t.Fatal(err)
	}
	f.Close()
	return Target{PressureFile: TargetOf(g).PressureFile}, func() *workload { return startChild(t, g, "thrash", f.Name()) }
}

// A job that stalls on memory: a watch of 10 % over 1 s (one kernel window)
// reports Over, and one of 10 % over 5 s (three windows of 1⅔ s, or 2 s
// without CAP_SYS_RESOURCE, held by consecutive events) reports Over with
// at least 5 s less a tenth of a window held, and no sooner after it was
// made. Both watch one file, each through its own descriptor and trigger.
func TestPSIOverHeldForDuration(t *testing.T) {
	needPSI(t)
	h := testHierarchy(t)
	w := newWatcher(t)
	tgt, start := stallingJob(t, h)
	if tgt.Mechanism() != PSI {
		t.Fatalf("target %+v: mechanism %v, want psi", tgt, tgt.Mechanism())
	}
	fds := openFDs(t)
	short, err := w.Watch(tgt, Rule{Limit: 10, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	watched := time.Now()
	long, err := w.Watch(tgt, Rule{Limit: 10, Duration: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if n := openFDs(t) - fds; n != 2 {
		t.Errorf("two PSI watches hold %d descriptors, want 2", n)
	}
	if w.privileged {
		if got, want := short.Trigger(), "some 100000 1000000"; got != want {
			t.Errorf("trigger of 10%% over 1 s: %q, want %q", got, want)
		}
		if got, want := long.Window(), 5*time.Second/3; got != want.Truncate(time.Microsecond) {
			t.Errorf("window of 5 s: %v, want %v", got, want)
		}
	} else {
		t.Logf("without CAP_SYS_RESOURCE: triggers %q and %q", short.Trigger(), long.Trigger())
	}
	start()

	deadline := time.After(testutil.Deadline(60 * time.Second))
	var shortEv, longEv *Event
	var evs []Event
	for shortEv == nil || longEv == nil {
		select {
		case <-w.Ready():
		case <-deadline:
			p, _ := os.ReadFile(tgt.PressureFile)
			t.Fatalf("after %v of stall: over of 1 s %v, of 5 s %v; %s:\n%s", testutil.Deadline(60*time.Second), shortEv != nil, longEv != nil, tgt.PressureFile, p)
		}
		evs = w.Drain(evs[:0])
		for _, e := range evs {
			if e.Kind != Over {
				t.Fatalf("event %v of %s, want over", e.Kind, e.Handle.Trigger())
			}
			switch {
			case e.Handle == short && shortEv == nil:
				shortEv = &e
			case e.Handle == long && longEv == nil:
				longEv = &e
			}
		}
	}
	t.Logf("1 s: held %v, avg10 %.2f%%, stall %v; 5 s: held %v after %v, avg10 %.2f%%, stall %v",
		shortEv.Held, shortEv.Avg10, shortEv.Stall, longEv.Held, longEv.At.Sub(watched).Round(time.Millisecond), longEv.Avg10, longEv.Stall)
	if shortEv.Held < short.psi.trig.hold || shortEv.Stall <= 0 {
		t.Errorf("over of 1 s: held %v (want at least %v), stall %v", shortEv.Held, short.psi.trig.hold, shortEv.Stall)
	}
	if longEv.Held < long.psi.trig.hold {
		t.Errorf("over of 5 s: held %v, want at least %v", longEv.Held, long.psi.trig.hold)
	}
	if d := longEv.At.Sub(watched); d < long.psi.trig.hold {
		t.Errorf("over of 5 s came %v after the watch began, before the stall could have held %v", d, long.psi.trig.hold)
	}
}

// A watched cgroup removed: EPOLLERR on its pressure file, Gone, and the
// watch's descriptor is closed.
func TestPSIGone(t *testing.T) {
	needPSI(t)
	h := testHierarchy(t)
	g := newJob(t, h, "gone", nil)
	w := newWatcher(t)
	fds := openFDs(t)
	hd, err := w.Watch(Target{PressureFile: TargetOf(g).PressureFile}, Rule{Limit: 50, Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w, hd, 10*time.Second, "the cgroup's removal"); ev.Kind != Gone {
		t.Fatalf("event %v, want gone", ev.Kind)
	}
	if n := openFDs(t) - fds; n != 0 {
		t.Errorf("%d descriptors left after the watch ended", n)
	}
}

// Rules and targets a PSI watch cannot take.
func TestPSIRefused(t *testing.T) {
	needPSI(t)
	h := testHierarchy(t)
	g := newJob(t, h, "refused", nil)
	w := newWatcher(t)
	tgt := Target{PressureFile: TargetOf(g).PressureFile}
	for _, c := range []struct {
		rule Rule
		want string
	}{
		{Rule{Limit: 0, Duration: time.Second}, "limit"},
		{Rule{Limit: 101, Duration: time.Second}, "limit"},
		{Rule{Limit: 20, Duration: 100 * time.Millisecond}, "duration"},
	} {
		if _, err := w.Watch(tgt, c.rule); !errors.Is(err, ErrRule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Watch(%+v): %v, want ErrRule naming %s", c.rule, err, c.want)
		}
	}
	missing := Target{PressureFile: filepath.Join(filepath.Dir(tgt.PressureFile)+"-missing", PressureFileName)}
	if _, err := w.Watch(missing, Rule{Limit: 20, Duration: time.Second}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Watch of a missing cgroup: %v, want fs.ErrNotExist", err)
	}
	if _, err := w.Watch(Target{}, Rule{Limit: 20, Duration: time.Second}); err == nil {
		t.Error("Watch of an empty target: no error")
	}
	w.Close()
	if _, err := w.Watch(tgt, Rule{Limit: 20, Duration: time.Second}); !errors.Is(err, ErrClosed) {
		t.Errorf("Watch after Close: %v, want ErrClosed", err)
	}
}

// TargetOf names the job's own cgroup (the runs' parent) in cgroup2 and,
// on a v1 or hybrid host, in the v1 memory controller.
func TestTargetOf(t *testing.T) {
	needCgroups(t)
	h := testHierarchy(t)
	g := newJob(t, h, "target", nil)
	tgt := TargetOf(g)
	root := strings.TrimPrefix(h.Root(), "/")
	switch h.Mode() {
	case cgroup.Unified:
		if want := filepath.Join("/sys/fs/cgroup", root, "jobs/target/memory.pressure"); tgt.PressureFile != want || tgt.V1Dir != "" {
			t.Errorf("TargetOf = %+v, want pressure file %s and no v1 directory", tgt, want)
		}
	case cgroup.Hybrid:
		if want := filepath.Join("/sys/fs/cgroup/unified", root, "jobs/target/memory.pressure"); tgt.PressureFile != want {
			t.Errorf("TargetOf pressure file %s, want %s", tgt.PressureFile, want)
		}
		fallthrough
	default:
		if want := filepath.Join("/sys/fs/cgroup/memory", root, "jobs/target"); tgt.V1Dir != want {
			t.Errorf("TargetOf v1 directory %s, want %s", tgt.V1Dir, want)
		}
	}
	for _, f := range []string{tgt.PressureFile, filepath.Join(tgt.V1Dir, "cgroup.event_control")} {
		if f == "" || f == "cgroup.event_control" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			t.Errorf("TargetOf names a missing file: %v", err)
		}
	}
}
