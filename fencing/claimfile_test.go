package fencing

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

func boottimeNow(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano()
}

func writtenT(t *testing.T, f *ClaimFile) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := f.Written(ctx); err != nil {
		t.Fatal(err)
	}
}

// The claim file says the session's expiry on CLOCK_BOOTTIME, in
// nanoseconds and in seconds as /proc/uptime's first field reads, with the
// member and lease, readable by every user; each Set replaces it.
func TestClaimFileSaysTheExpiry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "agent.claim")
	f := StartClaimFile(path, nil, nil)
	defer f.Close()
	if err := f.Written(context.Background()); err != nil {
		t.Fatalf("nothing set yet: %v", err)
	}
	before := boottimeNow(t)
	f.Set(Claim{Member: "e2e", Lease: 0x694d8c1a2b3c4d5e, Expiry: time.Now().Add(8 * time.Second)})
	writtenT(t, f)
	after := boottimeNow(t)
	deadline, member, lease, err := ReadClaim(path)
	if err != nil {
		t.Fatal(err)
	}
	if member != "e2e" || lease != 0x694d8c1a2b3c4d5e {
		t.Errorf("member %q lease %x", member, lease)
	}
	if lo, hi := before+int64(7*time.Second), after+int64(8*time.Second); deadline < lo || deadline > hi {
		t.Errorf("deadline %d, want between %d and %d", deadline, lo, hi)
	}
	b, _ := os.ReadFile(path)
	secs := strconv.FormatInt(deadline/1e9, 10) + "." + strings.TrimPrefix(strconv.FormatInt(1e9+deadline%1e9, 10), "1")
	if !strings.HasPrefix(string(b), "version=1\ndeadline="+secs+"\ndeadline_ns=") {
		t.Errorf("claim file:\n%s\nwant version=1, then deadline=%s", b, secs)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v (%v), want 0644", fi.Mode(), err)
	}

	f.Set(Claim{Member: "e2e", Lease: 1, Expiry: time.Now().Add(20 * time.Second)})
	writtenT(t, f)
	if next, _, _, err := ReadClaim(path); err != nil || next < deadline+int64(10*time.Second) {
		t.Errorf("after a later Set: deadline %d (%v), want past %d", next, err, deadline+int64(10*time.Second))
	}
	f.Remove()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("after Remove: %v", err)
	}
}

// The deadline is on the clock of the jobs' time namespace, the forker's
// children's (a guard started under `unshare --time`), not the agent's.
func TestClaimFileOnTheJobsClock(t *testing.T) {
	testutil.NeedRoot(t)
	if _, err := os.Stat("/proc/self/timens_offsets"); err != nil {
		t.Skip("no time namespaces in this kernel (CONFIG_TIME_NS):", err)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1):", err)
	}
	forker := exec.Command("unshare", "--time", "--boottime", "600", "sleep", "100")
	if err := forker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = forker.Process.Kill(); _ = forker.Wait() }()
	testutil.Eventually(t, 10*time.Second, "the forker in its time namespace", func() bool {
		off, err := boottimeOffset(strconv.Itoa(forker.Process.Pid))
		return err == nil && off == int64(600*time.Second)
	})
	path := filepath.Join(t.TempDir(), "agent.claim")
	f := StartClaimFile(path, func() int { return forker.Process.Pid }, nil)
	defer f.Close()
	before := boottimeNow(t)
	f.Set(Claim{Member: "m", Expiry: time.Now().Add(time.Second)})
	writtenT(t, f)
	deadline, _, _, err := ReadClaim(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(deadline - before); d < 600*time.Second || d > 602*time.Second {
		t.Fatalf("deadline %s after our boottime, want 601 s (600 s ahead in the jobs' namespace)", d)
	}
}

// A claim file that cannot be written is each waiting start's error,
// until a write succeeds again.
func TestClaimFileWriteError(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "run")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil { // a file where the directory belongs
		t.Fatal(err)
	}
	path := filepath.Join(blocker, "agent.claim")
	f := StartClaimFile(path, nil, nil)
	defer f.Close()
	f.Set(Claim{Member: "m", Expiry: time.Now().Add(time.Second)})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
	defer cancel()
	if err := f.Written(ctx); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("an unwritable claim file: %v", err)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	f.Set(Claim{Member: "m", Expiry: time.Now().Add(time.Second)})
	writtenT(t, f)
}

// A data_dir's claim file is named as systemd escapes its path.
func TestClaimFilePath(t *testing.T) {
	if got := ClaimFilePath("/var/lib/berth/"); got != "/run/berth/var-lib-berth.claim" {
		t.Errorf("ClaimFilePath(/var/lib/berth/) = %s", got)
	}
	long := "/" + strings.Repeat("a-b/", 40)
	if got := ClaimFilePath(long); !strings.HasPrefix(got, "/run/berth/data-dir-") || len(filepath.Base(got)) > 255 {
		t.Errorf("ClaimFilePath of a long data_dir = %s", got)
	}
}
