package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthd/berth/internal/docgen"
)

// Every command in the table gets a man page, generated from the same
// cobra commands as its help, and groff formats each without a warning.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	date := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	if err := docgen.ManPages(newRoot(), dir, date, "berth test"); err != nil {
		t.Fatal(err)
	}
	var cfg string
	want := []string{"berth.1", "berth.toml.5", "berth-completion.1"}
	for _, c := range commands(&cfg) {
		if !c.Hidden {
			want = append(want, "berth-"+c.Name()+".1")
		}
	}
	for _, name := range want {
		page, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("no man page %s: %v", name, err)
			continue
		}
		if !bytes.Contains(page, []byte(`.TH "`)) {
			t.Errorf("%s has no .TH header", name)
		}
		groffClean(t, name, page)
	}
	if _, err := os.Stat(filepath.Join(dir, "berth-gendocs.1")); err == nil {
		t.Errorf("the hidden gendocs command has a man page")
	}
	root, _ := os.ReadFile(filepath.Join(dir, "berth.1"))
	if !bytes.Contains(root, []byte("berth.toml(5)")) {
		t.Errorf("berth(1) does not point at berth.toml(5)")
	}
	// An indented table in the help stays a table (a preformatted block).
	top, _ := os.ReadFile(filepath.Join(dir, "berth-top.1"))
	if !bytes.Contains(top, []byte(".EX")) || !bytes.Contains(top, []byte("RESTARTS  restarts after")) {
		t.Errorf("berth-top(1) lost the layout of its column list:\n%s", top)
	}
	logs, _ := os.ReadFile(filepath.Join(dir, "berth-logs.1"))
	if !bytes.Contains(logs, []byte("<log_dir>/<job_id>")) {
		t.Errorf("berth-logs(1) lost <log_dir>/<job_id> (read as HTML):\n%s", logs)
	}
}

func groffClean(t *testing.T, name string, page []byte) {
	t.Helper()
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("groff not installed (Debian groff-base): pages not formatted")
	}
	cmd := exec.Command(groff, "-k", "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = bytes.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("groff on %s: %v\n%s", name, err, out)
	}
}
