package kernfile

import (
	"os"
	"testing"

	"github.com/prometheus/procfs"
)

func TestParseProcStat(t *testing.T) {
	line := []byte("4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 123 0 0 0 7 3 0 0 20 0 3 0 98765 1234567 89 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")
	st, err := ParseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	want := ProcStat{State: 'S', PPID: 1, Flags: 4194560, Threads: 3, StartTicks: 98765, RSSPages: 89}
	if st != want {
		t.Fatalf("got %+v, want %+v", st, want)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2", "1 (x) S z 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1 1"} {
		if _, err := ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("ParseProcStat(%q): no error", bad)
		}
	}
}

// ProcStatField counts from the last ')', as ParseProcStat does.
func TestProcStatField(t *testing.T) {
	line := []byte("4242 (a) 5 (c)) Z 1 4242 4242 0 -1 4194560 123 0 0 0 7 3 0 0 20 0 3 0 98765 1234567 89 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 256\n")
	for n, want := range map[int]string{3: "Z", 4: "1", 14: "7", 52: "256"} {
		if got, err := ProcStatField(line, n); err != nil || got != want {
			t.Errorf("ProcStatField(%d) = %q, %v; want %q", n, got, err, want)
		}
	}
	if _, err := ProcStatField(line, 53); err == nil {
		t.Error("ProcStatField(53) of a 52-field line: no error")
	}
	if _, err := ProcStatField([]byte("1 (x"), 3); err == nil {
		t.Error("ProcStatField of a line without a command name: no error")
	}
}

// TestReadProcStatAgreesWithProcfs checks the reader against
// prometheus/procfs on a live process (this test's own).
func TestReadProcStatAgreesWithProcfs(t *testing.T) {
	pid := os.Getpid()
	got, err := ReadProcStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	want, err := p.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if got.PPID != want.PPID || uint64(got.Flags) != uint64(want.Flags) || got.StartTicks != want.Starttime || string(got.State) != want.State {
		t.Fatalf("ReadProcStat %+v, procfs %+v", got, want)
	}
	if _, err := ReadProcStat(1 << 30); err == nil {
		t.Fatal("no error for a pid that cannot exist")
	}
}
