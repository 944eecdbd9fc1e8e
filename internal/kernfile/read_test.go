package kernfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
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
