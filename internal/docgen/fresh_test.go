package docgen

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkFresh fails when the file at path (relative to the repository
// root) is not what gen writes now, naming the first line that differs.
func checkFresh(t *testing.T, path string, gen func(io.Writer) error) {
	t.Helper()
	var b bytes.Buffer
	if err := gen(&b); err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatalf("%v (run make docs)", err)
	}
	if !bytes.Equal(have, b.Bytes()) {
		want := strings.Split(b.String(), "\n")
		got := strings.Split(string(have), "\n")
		line := 0
		for line < len(want) && line < len(got) && want[line] == got[line] {
			line++
		}
		var w, g string
		if line < len(want) {
			w = want[line]
		}
		if line < len(got) {
			g = got[line]
		}
		t.Fatalf("%s is stale: run make docs\nfirst difference at line %d:\n  file:      %q\n  generated: %q", path, line+1, g, w)
	}
}
