package boottime

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// printEnv, set in a re-executed test binary's environment, makes it
// print Now and Offset instead of running the tests.
const printEnv = "BERTH_BOOTTIME_TEST_PRINT"

func TestMain(m *testing.M) {
	if os.Getenv(printEnv) == "1" {
		off, err := Offset()
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(strconv.FormatInt(Now(), 10) + " " + strconv.FormatInt(off, 10) + "\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A process in a time namespace whose boottime runs 600 s ahead
// (unshare --time --boottime 600) reads the same Now as this one, within
// the time the child takes to start, and its offset is read as 600 s,
// by itself (Offset) and from outside (OffsetOf, here of this process:
// 0).
func TestNowIsOneDomainAcrossTimeNamespaces(t *testing.T) {
	unshare := testutil.Unshare(t)
	cmd := exec.Command(unshare, "--time", "--boottime", "600", "--monotonic", "600", os.Args[0])
	cmd.Env = append(os.Environ(), printEnv+"=1")
	before := Now()
	out, err := cmd.Output()
	after := Now()
	if err != nil {
		t.Fatalf("child in a time namespace: %v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		t.Fatalf("child printed %q", out)
	}
	now, _ := strconv.ParseInt(f[0], 10, 64)
	off, _ := strconv.ParseInt(f[1], 10, 64)
	if off != 600*int64(time.Second) {
		t.Errorf("the child's offset is %s, want 10m0s", time.Duration(off))
	}
	if now < before || now > after {
		t.Errorf("the child's Now is %s after this process's first reading and %s before its second: not one clock",
			time.Duration(now-before), time.Duration(after-now))
	}
	if own, err := OffsetOf(os.Getpid()); err != nil || own != 0 {
		t.Errorf("OffsetOf(this process) = %d, %v; want 0", own, err)
	}
}

// A process that does not exist is an error, not an offset of 0.
func TestOffsetOfGoneProcess(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if off, err := OffsetOf(cmd.Process.Pid); err == nil {
		t.Errorf("OffsetOf a reaped process = %d, want an error", off)
	}
}

func TestParseOffsets(t *testing.T) {
	for in, want := range map[string]int64{
		"monotonic           0         0\nboottime            0         0\n": 0,
		"monotonic         600         0\nboottime          600         0\n": 600e9,
		"monotonic 0 0\nboottime -5 250000000\n":                             -5e9 + 250e6,
		"1 0 0\n7 3 1\n":                                                     3e9 + 1,
	} {
		if got, err := parseOffsets(in); err != nil || got != want {
			t.Errorf("parseOffsets(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "monotonic 0 0\n", "boottime 1\n", "boottime x 0\n", "boottime 1 1000000000\n", "boottime 1 -1\n"} {
		if got, err := parseOffsets(in); err == nil {
			t.Errorf("parseOffsets(%q) = %d, want an error", in, got)
		}
	}
}

// Start ticks read in a namespace 600 s ahead are 60,000 ticks ahead;
// an offset that is not a whole tick converts to the tick below.
func TestShiftTicks(t *testing.T) {
	for _, tc := range []struct {
		read  uint64
		off   int64
		want  uint64
		whole bool
	}{
		{60500, 600e9, 500, true},
		{500, 0, 500, true},
		{400, -1e9, 500, true},
		{502, 15e6, 501, false},  // 1.5 ticks: the tick below
		{499, -15e6, 501, false}, // -1.5 ticks: floor is -2
	} {
		if got := ShiftTicks(tc.read, tc.off); got != tc.want || WholeTicks(tc.off) != tc.whole {
			t.Errorf("ShiftTicks(%d, %d) = %d, WholeTicks %v; want %d, %v", tc.read, tc.off, got, WholeTicks(tc.off), tc.want, tc.whole)
		}
	}
}
