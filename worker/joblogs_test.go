package worker

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A job's log on a full file system: every write still reports success (the
// job's output pipe never blocks), the agent logs the failure once with its
// cause, and once space returns it logs that the file is written again with
// the bytes lost meanwhile.
func TestJobLogOnFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	var logs JobLogs
	defer logs.CloseAll()
	w := logs.Writer("chatty", dir, 1<<20, 1, false, log)
	line := append(bytes.Repeat([]byte("x"), 1023), '\n')
	write := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if k, err := w.Write(line); k != len(line) || err != nil {
				t.Fatalf("write %d: (%d, %v), want (%d, nil)", i, k, err, len(line))
			}
		}
	}
	write(10)
	// Leave no room.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(filler, io.LimitReader(zeroReader{}, 1<<20)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("fill the tmpfs: %v, want ENOSPC", err)
	}
	filler.Close()
	write(20)
	if n := strings.Count(out.String(), "job log write failed"); n != 1 || !strings.Contains(out.String(), "no space left on device") ||
		!strings.Contains(out.String(), "job_id=chatty") {
		t.Fatalf("want one failure line naming the job and ENOSPC, got %d:\n%s", n, out.String())
	}
	if err := os.Remove(filler.Name()); err != nil {
		t.Fatal(err)
	}
	write(5)
	got := out.String()
	if n := strings.Count(got, "job log written again"); n != 1 || strings.Contains(got, "bytes_lost=0") || !strings.Contains(got, "bytes_lost=") {
		t.Fatalf("want one recovery line with the bytes lost, got %d:\n%s", n, got)
	}
	b, err := os.ReadFile(filepath.Join(dir, "chatty.log"))
	if err != nil || !bytes.HasSuffix(b, bytes.Repeat(line, 5)) {
		t.Errorf("the log does not end with the lines written after space returned (err %v, %d bytes)", err, len(b))
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A job the agent no longer runs does not keep its log file open; its
// writer opens the file again, appending, when the job comes back.
func TestJobLogReleased(t *testing.T) {
	dir := t.TempDir()
	var logs JobLogs
	defer logs.CloseAll()
	file := filepath.Join(dir, "moved.log")
	open := func() bool {
		es, _ := os.ReadDir("/proc/self/fd")
		for _, e := range es {
			if p, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && p == file {
				return true
			}
		}
		return false
	}
	w := logs.Writer("moved", dir, 1<<20, 1, false, slog.Default())
	_, _ = w.Write([]byte("first\n"))
	if !open() {
		t.Fatal("the log file is not open after a write")
	}
	logs.Release("moved")
	if open() {
		t.Fatal("the log file is still open after release")
	}
	w = logs.Writer("moved", dir, 1<<20, 1, false, slog.Default())
	_, _ = w.Write([]byte("second\n"))
	b, err := os.ReadFile(file)
	if err != nil || string(b) != "first\nsecond\n" {
		t.Fatalf("log after the job came back = %q (%v), want both lines", b, err)
	}
}
