package cgroup

import (
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"unsafe"

	"github.com/berthd/berth/limits"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// NewExisting leaves unwritten the limits an existing cgroup holds (the
// kernel's inotify IN_MODIFY, which every write(2) raises, tells), writes
// those that changed, and lifts those no longer set, as New: the limits
// in force are the same either way.
func TestNewExistingWritesOnlyWhatChanged(t *testing.T) {
	h := testHierarchy(t)
	const rel = "jobs/existing"
	res := func(l limits.Limits) *limitsRes {
		t.Helper()
		r, _, err := l.Resources(nil)
		if err != nil {
			t.Fatal(err)
		}
		return &limitsRes{l: l, written: limits.Defaults(r)}
	}
	first := res(limits.Limits{CPU: 0.5, CPUWeight: 300, Memory: 64 << 20, Pids: 20})
	if _, err := h.New(rel, first.written); err != nil {
		t.Fatal(err)
	}
	// The files NewExisting may write, and what each holds under a
	// limit: v1 and v2 name them apart.
	type file struct {
		path string
		want func(limits.Limits) string
	}
	var files []file
	if h.Mode() == Unified {
		d := h.unifiedDir(rel)
		files = []file{
			{filepath.Join(d, "cpu.max"), func(l limits.Limits) string {
				if l.CPU > 0 {
					return itoa(l.QuotaMicros()) + " 100000"
				}
				return "max 100000"
			}},
		}
	} else {
		root := readFile(t, filepath.Join(h.v1Dir("memory", ""), "memory.limit_in_bytes")) // unlimited
		files = []file{
			{filepath.Join(h.v1Dir("cpu", rel), "cpu.cfs_quota_us"), func(l limits.Limits) string {
				if l.CPU > 0 {
					return itoa(l.QuotaMicros())
				}
				return "-1"
			}},
			{filepath.Join(h.v1Dir("cpu", rel), "cpu.shares"), func(l limits.Limits) string {
				if l.CPUWeight > 0 {
					return itoa(limits.CPUWeightToShares(l.CPUWeight))
				}
				return "1024"
			}},
			{filepath.Join(h.v1Dir("memory", rel), "memory.limit_in_bytes"), func(l limits.Limits) string {
				if l.Memory > 0 {
					return itoa(l.Memory)
				}
				return root
			}},
			{filepath.Join(h.v1Dir("pids", rel), "pids.max"), func(l limits.Limits) string {
				if l.Pids > 0 {
					return itoa(l.Pids)
				}
				return "max"
			}},
		}
		if h.memswAvailable() {
			files = append(files, file{filepath.Join(h.v1Dir("memory", rel), "memory.memsw.limit_in_bytes"), func(l limits.Limits) string {
				if l.Memory > 0 {
					return itoa(l.Memory)
				}
				return root
			}})
		}
	}
	watch := newModifyWatch(t)
	for _, f := range files {
		watch.add(t, f.path)
	}
	check := func(r *limitsRes, wantWritten []string) {
		t.Helper()
		if _, err := h.NewExisting(rel, r.written); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if got, want := readFile(t, f.path), f.want(r.l); got != want {
				t.Errorf("%+v: %s = %q, want %q", r.l, f.path, got, want)
			}
		}
		written := watch.modified(t)
		slices.Sort(written)
		slices.Sort(wantWritten)
		if !slices.Equal(written, wantWritten) {
			t.Errorf("%+v: files written %v, want %v", r.l, written, wantWritten)
		}
	}
	base := func(p string) string { return filepath.Base(p) }
	var all []string
	for _, f := range files {
		all = append(all, base(f.path))
	}
	// The same limits: nothing written.
	check(first, nil)
	// The CPU and the memory changed: their files only.
	changed := res(limits.Limits{CPU: 0.25, CPUWeight: 300, Memory: 32 << 20, Pids: 20})
	var want []string
	for _, f := range all {
		if f != "cpu.shares" && f != "pids.max" {
			want = append(want, f)
		}
	}
	check(changed, want)
	// None left: each lifted to the kernel's default.
	check(res(limits.Limits{}), all)
	// And the defaults again: nothing written.
	check(res(limits.Limits{}), nil)
}

// limitsRes is a definition's limits and the resources an adopting agent
// writes for them (limits.Defaults).
type limitsRes struct {
	l       limits.Limits
	written *specs.LinuxResources
}

func itoa[T int64 | uint64](v T) string { return strconv.FormatInt(int64(v), 10) }

// modifyWatch is an inotify instance watching files for IN_MODIFY.
type modifyWatch struct {
	fd    int
	names map[int32]string
}

func newModifyWatch(t *testing.T) *modifyWatch {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &modifyWatch{fd: fd, names: map[int32]string{}}
}

func (w *modifyWatch) add(t *testing.T, path string) {
	t.Helper()
	wd, err := unix.InotifyAddWatch(w.fd, path, unix.IN_MODIFY)
	if err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	w.names[int32(wd)] = filepath.Base(path)
}

// modified lists, once each, the files written since the last call (the
// events are queued by the write itself, before it returns).
func (w *modifyWatch) modified(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			seen[w.names[ev.Wd]] = true
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
	var out []string
	for name := range seen {
		out = append(out, name)
	}
	return out
}
