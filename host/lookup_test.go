package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The checks a start runs before any process exists, as validation and
// the agent's pre-stop check use them.
func TestHostChecks(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file, dir string
		env       []string
		want      string // "" : found
	}{
		{"sleep", "", nil, ""},
		{prog, "", nil, ""},
		{"./prog", dir, nil, ""},
		{"prog", "", []string{"PATH=" + dir}, ""},
		{"prog", "", []string{"PATH=/nonexistent"}, `"prog" is not an executable file in any directory of PATH=/nonexistent`},
		{dir, "", nil, "is not a regular file"},
		{"./nope", dir, nil, "no such file or directory"},
	} {
		_, err := FindProgram(tc.file, tc.env, tc.dir)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("FindProgram(%q, %v, %q) = %v, want %q", tc.file, tc.env, tc.dir, err, tc.want)
		}
	}
	if err := CheckUser("root:root"); err != nil {
		t.Errorf("CheckUser(root:root) = %v", err)
	}
	if err := CheckUser(""); err != nil {
		t.Errorf("CheckUser(\"\") = %v", err)
	}
	if err := CheckUser("berth-no-such-user"); err == nil || !strings.Contains(err.Error(), "berth-no-such-user") {
		t.Errorf("CheckUser(unknown) = %v", err)
	}
	if err := CheckDir(dir); err != nil {
		t.Errorf("CheckDir(%s) = %v", dir, err)
	}
	if err := CheckDir(prog); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("CheckDir(file) = %v", err)
	}
}
