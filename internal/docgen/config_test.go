package docgen

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/config"
)

// docs/config.md is what ConfigMarkdown writes now: a key added, removed
// or changed in config/keys.go without `make docs` fails here.
func TestConfigMarkdownFresh(t *testing.T) {
	checkFresh(t, ConfigMarkdownPath, ConfigMarkdown)
}

// Every key of the reference is in the Markdown and in the man page, and
// groff formats the page without a warning.
func TestConfigManPage(t *testing.T) {
	var md, man bytes.Buffer
	if err := ConfigMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	date := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	if err := ConfigMan(&man, date, "berth test"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(man.String(), `.TH "BERTH.TOML" "5" "Jan 2026" "berth test" "File Formats"`) {
		t.Errorf("man page header:\n%.300s", man.String())
	}
	for _, s := range config.Sections() {
		for _, k := range s.Keys {
			if !strings.Contains(md.String(), "| `"+k.Name+"` |") {
				t.Errorf("docs/config.md lacks %s.%s", s.ID, k.Name)
			}
			if !strings.Contains(man.String(), `\fB`+strings.ReplaceAll(k.Name, "_", "_")+`\fP`) {
				t.Errorf("berth.toml(5) lacks %s.%s", s.ID, k.Name)
			}
		}
	}
	// "<log_dir>" must survive Markdown (not be taken for an HTML tag).
	if !strings.Contains(man.String(), "<log_dir>/<job_id>") {
		t.Errorf("berth.toml(5) lost <log_dir>/<job_id>")
	}
	groffCheck(t, "berth.toml.5", man.Bytes())
}

// groffCheck formats a man page with groff and fails on any warning.
func groffCheck(t *testing.T, name string, page []byte) {
	t.Helper()
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("groff not installed (Debian groff-base): the pages are not formatted")
	}
	cmd := exec.Command(groff, "-k", "-man", "-Tutf8", "-ww", "-z") // -k: preconv, as man-db runs it
	cmd.Stdin = bytes.NewReader(page)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("groff on %s: %v\n%s", name, err, out)
	}
}
