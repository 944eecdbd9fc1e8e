package kernfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReadAt(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "memory.max")
	if err := os.WriteFile(p, []byte("1048576\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	b, err := ReadAt(unix.AT_FDCWD, p, buf)
	if err != nil || string(b) != "1048576\n" {
		t.Errorf("ReadAt = %q, %v", b, err)
	}
	d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	if b, err := ReadAt(d, "memory.max", buf); err != nil || string(b) != "1048576\n" {
		t.Errorf("ReadAt relative to a directory fd = %q, %v", b, err)
	}
	if _, err := ReadAt(d, "memory.max", buf[:8]); !errors.Is(err, ErrTooLong) || !strings.Contains(err.Error(), "memory.max") {
		t.Errorf("ReadAt into a buffer the content fills: %v, want ErrTooLong naming the file", err)
	}
	if _, err := ReadAt(d, "gone", buf); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadAt of a missing file: %v, want fs.ErrNotExist", err)
	}
	// A procfs seq_file.
	if b, err := ReadAt(unix.AT_FDCWD, "/proc/self/stat", make([]byte, 4096)); err != nil || !strings.Contains(string(b), ")") {
		t.Errorf("ReadAt(/proc/self/stat) = %q, %v", b, err)
	}
}

func TestReadWrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpuset.cpus")
	long := strings.Repeat("0-3,", 1000)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, long); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(p); err != nil || string(b) != long {
		t.Errorf("Read of a %d-byte file: %d bytes, %v", len(long), len(b), err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "gone")); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Read of a missing file: %v, want fs.ErrNotExist naming it", err)
	}
	if err := Write(filepath.Join(t.TempDir(), "gone"), "1"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Write to a missing file: %v, want ENOENT", err)
	}
}

// ReadPath reads what ReadAt reads, names the path in its errors, takes
// paths longer than its in-place buffer, and does not allocate.
func TestReadPath(t *testing.T) {
	proc, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(proc)
	buf := make([]byte, 4096)
	var p Path
	p.AddInt(os.Getpid()).Add("/").Add("stat")
	if p.String() != strconv.Itoa(os.Getpid())+"/stat" {
		t.Fatalf("Path = %q", p.String())
	}
	b, err := ReadPath(proc, &p, buf)
	if err != nil || !strings.HasPrefix(string(b), strconv.Itoa(os.Getpid())+" (") {
		t.Errorf("ReadPath(/proc/PID/stat) = %q, %v", b, err)
	}
	if n := testing.AllocsPerRun(100, func() {
		var p Path
		if _, err := ReadPath(proc, p.AddInt(os.Getpid()).Add("/stat"), buf); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ReadPath allocated %v times per read, want 0", n)
	}
	var gone Path
	if _, err := ReadPath(proc, gone.Add("self/no-such-file"), buf); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "self/no-such-file") {
		t.Errorf("ReadPath of a missing file: %v, want fs.ErrNotExist naming it", err)
	}
	if _, err := ReadPath(proc, new(Path).Add("self/stat"), buf[:8]); !errors.Is(err, ErrTooLong) {
		t.Errorf("ReadPath into a buffer the content fills: %v, want ErrTooLong", err)
	}

	// A path longer than the in-place buffer: a directory 300 bytes deep.
	dir := t.TempDir()
	long := strings.Repeat("d", 100) + "/" + strings.Repeat("e", 100) + "/" + strings.Repeat("f", 100)
	if err := os.MkdirAll(filepath.Join(dir, long), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, long, "pids.current"), []byte("3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	var lp Path
	lp.Add(long).Add("/").Add("pids.current")
	if lp.String() != long+"/pids.current" {
		t.Fatalf("long Path = %q", lp.String())
	}
	if b, err := ReadPath(d, &lp, buf); err != nil || string(b) != "3\n" {
		t.Errorf("ReadPath of a %d-byte path = %q, %v", len(lp.String()), b, err)
	}
}
