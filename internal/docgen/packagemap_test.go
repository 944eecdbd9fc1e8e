package docgen

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every Go package of the repository has its entry in docs/design.md's
// package map (a bullet naming it as **`dir`**), and every entry names a
// package that exists: the map a newcomer reads matches the code.
func TestPackageMapMatchesTheCode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start, end := strings.Index(text, "## Package map"), strings.Index(text, "## cgroup layout")
	if start < 0 || end < start {
		t.Fatal(`docs/design.md has no "## Package map" section before "## cgroup layout"`)
	}
	section := text[start:end]
	pkgs := map[string]bool{}
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "dist") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") {
			rel, _ := filepath.Rel(repoRoot, filepath.Dir(path))
			pkgs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range pkgs {
		if p != "." && !strings.Contains(section, "**`"+p+"`**") {
			t.Errorf("package %s has no entry (**`%s`**) in docs/design.md's package map", p, p)
		}
	}
	for _, line := range strings.Split(section, "\n") {
		for rest := line; ; {
			i := strings.Index(rest, "**`")
			if i < 0 {
				break
			}
			rest = rest[i+3:]
			j := strings.Index(rest, "`**")
			if j < 0 {
				break
			}
			if p := rest[:j]; !pkgs[p] {
				t.Errorf("docs/design.md's package map names %s, which is not a package", p)
			}
			rest = rest[j+3:]
		}
	}
}
