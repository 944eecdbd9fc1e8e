package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Fixture tests: the parsers of cgroup interface files, on files written to
// a temporary directory in the shapes the kernel writes them
// (Documentation/admin-guide/cgroup-v2.rst "Interface Files",
// Documentation/admin-guide/cgroup-v1/memory.rst). They run without root and
// beside the real-kernel tests, so a parser change is caught on any host.

func fixture(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestQuotaCoresFixtures(t *testing.T) {
	for _, c := range []struct {
		quota, period string
		want          float64
		wantErr       bool
	}{
		{"50000", "100000", 0.5, false},    // v1 cpu.cfs_quota_us / cpu.cfs_period_us
		{"200000\n", "100000\n", 2, false}, // two cores
		{"-1", "100000", 0, false},         // v1: no quota
		{"max", "100000", 0, false},        // v2 cpu.max "max 100000"
		{"50000", "0", 0, false},
		{"half", "100000", 0, true},
		{"50000", "-5", 0, true},
	} {
		got, err := quotaCores(c.quota, c.period)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("quotaCores(%q, %q) = %v, %v; want %v, error %v", c.quota, c.period, got, err, c.want, c.wantErr)
		}
	}
}

// io.stat (v2, nested keyed) and blkio.throttle.io_service_bytes_recursive
// (v1) summed over devices, as FullUsage reads them.
func TestIOFixtures(t *testing.T) {
	v2 := filepath.Dir(fixture(t, "io.stat", "8:16 rbytes=1000 wbytes=2000 rios=1 wios=2 dbytes=0 dios=0\n8:0 rbytes=30 wbytes=40 rios=3 wios=4\n"))
	v1 := filepath.Dir(fixture(t, "blkio.throttle.io_service_bytes_recursive", "8:0 Read 500\n8:0 Write 600\n8:0 Sync 1100\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 1100\n8:16 Read 7\n8:16 Write 8\nTotal 1115\n"))
	var u Usage
	if err := readIOV2(v2, &u); err != nil || u.IOReadBytes != 1030 || u.IOWriteBytes != 2040 {
		t.Errorf("io.stat: read %d write %d, %v; want 1030 2040", u.IOReadBytes, u.IOWriteBytes, err)
	}
	u = Usage{}
	if err := readIOV1(v1, &u); err != nil || u.IOReadBytes != 507 || u.IOWriteBytes != 608 {
		t.Errorf("blkio: read %d write %d, %v; want 507 608", u.IOReadBytes, u.IOWriteBytes, err)
	}
	if err := readIOV2(t.TempDir(), &u); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "io.stat") {
		t.Errorf("io.stat missing: %v, want fs.ErrNotExist naming the file", err)
	}
}

// cgroup.procs: one pid per line; the agent's own pid (a launcher thread
// passing through a v1 group) is never listed as a job's.
func TestAppendPidsFixtures(t *testing.T) {
	got, err := appendPids([]int{7}, []byte("1\n23\n"+strconv.Itoa(self)+"\n456"))
	if err != nil || !slices.Equal(got, []int{7, 1, 23, 456}) {
		t.Errorf("appendPids = %v, %v; want [7 1 23 456]", got, err)
	}
	for _, bad := range []string{"12 x\n", "max\n", "0\n", "-3\n", "99999999999\n"} {
		if _, err := appendPids(nil, []byte(bad)); err == nil {
			t.Errorf("appendPids(%q): no error", bad)
		}
	}
	if got, err := appendPids(nil, nil); err != nil || len(got) != 0 {
		t.Errorf("appendPids of an empty file = %v, %v", got, err)
	}
}
