package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A write replaces the file whole with the given mode and leaves no
// temporary file; a write that cannot complete keeps the old content.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	for _, content := range []string{"first\n", "second, longer\n", "3\n"} {
		if err := WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != content {
			t.Fatalf("read %q (%v), want %q", b, err, content)
		}
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", fi.Mode(), err)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}

	// The rename cannot replace a directory: the old content stays, the
	// temporary file goes, the error names the path.
	d := filepath.Join(dir, "a-dir")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	err = WriteFile(d, []byte("x"), 0o600)
	if err == nil || !strings.Contains(err.Error(), d) {
		t.Errorf("write over a directory: %v, want an error naming %s", err, d)
	}
	if _, err := os.Stat(d + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left after a failed write: %v", err)
	}
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
		t.Errorf("the old %s is gone: %v", d, err)
	}
	// No directory: nothing is written.
	if err := WriteFile(filepath.Join(dir, "none", "state"), []byte("x"), 0o600); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}
