package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
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

func TestReadUintFixtures(t *testing.T) {
	for _, c := range []struct {
		text    string
		want    uint64
		wantErr bool
	}{
		{"1048576\n", 1048576, false},
		{"max\n", 0, false}, // memory.max, pids.max with no limit
		{"0", 0, false},
		{"18446744073709551615\n", 18446744073709551615, false}, // v1 "unlimited" memory
		{"-1\n", 0, true},
		{"12 34\n", 0, true},
		{"", 0, true},
	} {
		p := fixture(t, "memory.max", c.text)
		got, err := readUint(p)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("readUint(%q) = %d, %v; want %d, error %v", c.text, got, err, c.want, c.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), p) {
			t.Errorf("readUint(%q) error %q does not name the file", c.text, err)
		}
	}
	if _, err := readUint(filepath.Join(t.TempDir(), "gone")); !errors.Is(err, fs.ErrNotExist) || !isGone(err) {
		t.Errorf("readUint of a missing file: %v, want fs.ErrNotExist (isGone)", err)
	}
}

func TestReadKeysFixtures(t *testing.T) {
	// cgroup v2 memory.events and cpu.stat; v1 memory.oom_control (its
	// oom_kill line exists since Linux 4.13).
	events := "low 0\nhigh 12\nmax 40\noom 3\noom_kill 2\noom_group_kill 0\n"
	cpuStat := "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 100\nnr_throttled 7\nthrottled_usec 35000\n"
	oomControl := "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"

	var kills, usage, throttled, v1kills, absent uint64 = 0, 0, 0, 0, 99
	if err := readKeys(fixture(t, "memory.events", events), map[string]*uint64{"oom_kill": &kills, "oom_group_kill_x": &absent}); err != nil {
		t.Fatal(err)
	}
	if kills != 2 {
		t.Errorf("memory.events oom_kill = %d, want 2 (not oom 3, not oom_group_kill)", kills)
	}
	if absent != 99 {
		t.Errorf("a key the file lacks was written: %d", absent)
	}
	if err := readKeys(fixture(t, "cpu.stat", cpuStat), map[string]*uint64{"usage_usec": &usage, "nr_throttled": &throttled}); err != nil {
		t.Fatal(err)
	}
	if usage != 2500000 || throttled != 7 {
		t.Errorf("cpu.stat usage_usec %d nr_throttled %d, want 2500000 7", usage, throttled)
	}
	if err := readKeys(fixture(t, "memory.oom_control", oomControl), map[string]*uint64{"oom_kill": &v1kills}); err != nil {
		t.Fatal(err)
	}
	if v1kills != 5 {
		t.Errorf("memory.oom_control oom_kill = %d, want 5 (not oom_kill_disable)", v1kills)
	}

	p := fixture(t, "cpu.stat", "usage_usec many\n")
	err := readKeys(p, map[string]*uint64{"usage_usec": &usage})
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "usage_usec") {
		t.Errorf("a value that is not a number: %v, want an error naming the file and key", err)
	}
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
