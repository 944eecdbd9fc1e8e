package memwatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// shmFile is a unique file name in /dev/shm, removed at the end of the
// test. tmpfs pages are charged to the cgroup of the process that writes
// them, and uncharged when the file is removed.
func shmFile(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	f := filepath.Join("/dev/shm", "berth-memwatch-"+hex.EncodeToString(b))
	t.Cleanup(func() { _ = os.Remove(f) })
	return f
}

// usage reads a v1 memory cgroup's memory.usage_in_bytes.
func usage(t *testing.T, dir string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A job writes 24 MiB to tmpfs under a 16 MiB threshold: Over, with the
// usage above; the file removed: Under; the cgroup deleted: Gone, and
// the watch's descriptor is closed. The watch holds one descriptor (the
// eventfd: the usage file is closed once registered, and the kernel still
// signals), and the watcher no goroutine of the job's.
func TestThresholdCrossesUpDownAndGone(t *testing.T) {
	needV1Memory(t)
	h := testHierarchy(t)
	g := newJob(t, h, "shm", memoryLimit(64<<20))
	tgt := TargetOf(g)
	if tgt.Mechanism() != Threshold {
		t.Fatalf("target %+v: mechanism %v, want threshold on a %s host", tgt, tgt.Mechanism(), h.Mode())
	}
	w := newWatcher(t)
	fds := openFDs(t)
	const high = 16 << 20
	hd, err := w.Watch(tgt, Rule{High: high})
	if err != nil {
		t.Fatal(err)
	}
	if n := openFDs(t) - fds; n != 1 {
		t.Errorf("a threshold watch holds %d descriptors, want 1 (the eventfd)", n)
	}
	if got, want := hd.Trigger(), "memory.usage_in_bytes 16777216"; got != want {
		t.Errorf("Trigger() = %q, want %q", got, want)
	}
	f := shmFile(t)
	job := startIn(t, g, "sh", "-c", "head -c 25165824 /dev/zero > "+f)

	ev := next(t, w, hd, 20*time.Second, "usage over 16 MiB")
	if ev.Kind != Over || ev.Usage < high {
		t.Fatalf("event %v with usage %d; want over, at least %d", ev.Kind, ev.Usage, high)
	}
	<-job.done
	if job.err != nil {
		t.Fatalf("job: %v", job.err)
	}
	if u := usage(t, tgt.V1Dir); u < high {
		t.Fatalf("usage %d after the job wrote 24 MiB to tmpfs, want at least %d", u, high)
	}
	if err := os.Remove(f); err != nil {
		t.Fatal(err)
	}
	ev = next(t, w, hd, 20*time.Second, "usage back under 16 MiB")
	if ev.Kind != Under || ev.Usage >= high {
		t.Fatalf("event %v with usage %d; want under, below %d", ev.Kind, ev.Usage, high)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	ev = next(t, w, hd, 20*time.Second, "the cgroup's removal")
	if ev.Kind != Gone {
		t.Fatalf("event %v after the cgroup was deleted, want gone", ev.Kind)
	}
	if n := openFDs(t) - fds; n != 0 {
		t.Errorf("%d descriptors left after the watch ended", n)
	}
	hd.Close() // ended already: nothing to do
}

// A job already above the threshold when it is watched (an adopted run)
// is reported Over at once.
func TestThresholdAboveAtWatch(t *testing.T) {
	needV1Memory(t)
	h := testHierarchy(t)
	g := newJob(t, h, "adopted", memoryLimit(64<<20))
	f := shmFile(t)
	job := startIn(t, g, "sh", "-c", "head -c 16777216 /dev/zero > "+f)
	<-job.done
	tgt := TargetOf(g)
	if u := usage(t, tgt.V1Dir); u < 16<<20 {
		t.Fatalf("usage %d after 16 MiB written to tmpfs", u)
	}
	w := newWatcher(t)
	hd, err := w.Watch(tgt, Rule{High: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ev := next(t, w, hd, 5*time.Second, "over at watch")
	if ev.Kind != Over || ev.Usage < 16<<20 {
		t.Fatalf("event %v with usage %d, want over at once", ev.Kind, ev.Usage)
	}
}

// The job's cgroup deleted and made again under the same name (the job
// started anew) before the watcher hears of the removal: the old watch
// is Gone, not a watch of the new cgroup.
func TestThresholdGoneWhenMadeAgain(t *testing.T) {
	needV1Memory(t)
	h := testHierarchy(t)
	g := newJob(t, h, "again", memoryLimit(64<<20))
	w := newWatcher(t)
	hd, err := w.Watch(TargetOf(g), Rule{High: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	newJob(t, h, "again", memoryLimit(64<<20))
	if ev := next(t, w, hd, 20*time.Second, "the first cgroup's removal"); ev.Kind != Gone {
		t.Fatalf("event %v, want gone", ev.Kind)
	}
}

// Without memory_high a v1 watch has nothing to watch: the error says why.
// A cgroup that does not exist is an fs.ErrNotExist.
func TestThresholdRefused(t *testing.T) {
	needV1Memory(t)
	h := testHierarchy(t)
	g := newJob(t, h, "nohigh", nil)
	w := newWatcher(t)
	_, err := w.Watch(TargetOf(g), Rule{Limit: 20, Duration: 10 * time.Second})
	if !errors.Is(err, ErrRule) || !strings.Contains(err.Error(), "memory_high") {
		t.Errorf("Watch without High: %v, want ErrRule naming memory_high", err)
	}
	_, err = w.Watch(Target{V1Dir: TargetOf(g).V1Dir + "-missing"}, Rule{High: 1 << 20})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Watch of a missing cgroup: %v, want fs.ErrNotExist", err)
	}
}
