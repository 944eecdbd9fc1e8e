package kernfile

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/prometheus/procfs"
)

// TestProcCgroup2AgreesWithProcfs checks the reader against
// prometheus/procfs on every process of the host (their cgroup2 paths
// differ under systemd, lane 1 and 2; here most are at the root), and
// that a pid that cannot exist is an error naming the file.
func TestProcCgroup2AgreesWithProcfs(t *testing.T) {
	procs, err := procfs.AllProcs()
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, p := range procs {
		cgs, perr := p.Cgroups()
		got, err := ProcCgroup2(p.PID)
		if perr != nil || errors.Is(err, fs.ErrNotExist) {
			continue // exited between the two reads
		}
		want, found := "", false
		for _, cg := range cgs {
			if cg.HierarchyID == 0 {
				want, found = cg.Path, true
			}
		}
		switch {
		case !found && !errors.Is(err, ErrNoCgroup2):
			t.Errorf("pid %d: procfs finds no cgroup2 line, ProcCgroup2 = %q, %v", p.PID, got, err)
		case found && (err != nil || got != want):
			t.Errorf("pid %d: ProcCgroup2 = %q, %v; procfs %q", p.PID, got, err, want)
		}
		compared++
	}
	if compared == 0 {
		t.Fatal("no process compared")
	}
	if _, err := ProcCgroup2(1 << 30); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("pid 2^30: %v, want a not-exist error", err)
	}
}
