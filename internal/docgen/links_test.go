package docgen

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository root, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// markdownFiles returns every Markdown file of the repository, relative to
// its root, leaving out hidden directories and build output.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin" || rel == "dist") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 5 {
		t.Fatalf("found only %d Markdown files under %s", len(out), repoRoot)
	}
	return out
}

var (
	fenceRE    = regexp.MustCompile("(?ms)^[ \t]*(```|~~~)[^\n]*\n.*?^[ \t]*(```|~~~)[ \t]*$")
	codeSpanRE = regexp.MustCompile("`[^`\n]*`")
	linkRE     = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	refDefRE   = regexp.MustCompile(`(?m)^[ \t]*\[[^\]\n]+\]:[ \t]*(\S+)`)
	headingRE  = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)
	inlineRE   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTagRE  = regexp.MustCompile(`<[^>]+>`)
)

// stripCode removes fenced code blocks and code spans, where brackets are
// not links.
func stripCode(text string) string {
	text = fenceRE.ReplaceAllString(text, "")
	return codeSpanRE.ReplaceAllString(text, "``")
}

// anchors returns the heading anchors GitHub gives a Markdown text: the
// heading's text without markup, lower-cased, every character that is not
// a letter, digit, space, hyphen or underscore dropped, spaces made
// hyphens, and -1, -2, … added to a repeated one.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
		h := inlineRE.ReplaceAllString(m[1], "$1")
		h = htmlTagRE.ReplaceAllString(h, "")
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), unicode.IsMark(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// linkProblem returns what is wrong with a link from the Markdown file
// from (relative to the root) to target, or "".
func linkProblem(from, target string, anchorsOf func(string) (map[string]bool, error)) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, frag, _ := strings.Cut(target, "#")
	dest := from
	if path != "" {
		if strings.HasPrefix(path, "/") {
			return "absolute path: links must be relative, so that they work in a clone"
		}
		dest = filepath.Clean(filepath.Join(filepath.Dir(from), path))
		if dest == ".." || strings.HasPrefix(dest, "../") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
			return "no such file: " + dest
		}
	}
	if frag == "" {
		return ""
	}
	if !strings.HasSuffix(dest, ".md") {
		return ""
	}
	as, err := anchorsOf(dest)
	if err != nil {
		return err.Error()
	}
	if !as[frag] {
		return fmt.Sprintf("%s has no heading with anchor #%s", dest, frag)
	}
	return ""
}

// Every relative link and #anchor in every Markdown file of the repository
// resolves in a clone: the file exists inside the repository, and the
// anchor names a heading of it.
func TestMarkdownLinks(t *testing.T) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(rel string) (map[string]bool, error) {
		if as, ok := cache[rel]; ok {
			return as, nil
		}
		b, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err != nil {
			return nil, err
		}
		cache[rel] = anchors(string(b))
		return cache[rel], nil
	}
	checked := 0
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		text := stripCode(string(b))
		var targets []string
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		for _, m := range refDefRE.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			checked++
			if p := linkProblem(file, target, anchorsOf); p != "" {
				t.Errorf("%s: link %s: %s", file, target, p)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d links", checked)
	}
}

// The checker catches what it is for, and computes anchors as GitHub does.
func TestMarkdownLinkChecker(t *testing.T) {
	as := anchors("# How berth works\n## `[agent.client]`\n## Secrets: env, env_file, and what the API shows\n## A job's life\n## Notes\n## Notes\n```\n# not a heading\n```\n")
	for _, want := range []string{"how-berth-works", "agentclient", "secrets-env-env_file-and-what-the-api-shows", "a-jobs-life", "notes", "notes-1"} {
		if !as[want] {
			t.Errorf("no anchor %q in %v", want, as)
		}
	}
	if as["not-a-heading"] {
		t.Error("a line in a code block taken for a heading")
	}
	anchorsOf := func(string) (map[string]bool, error) { return as, nil }
	for _, c := range []struct{ target, want string }{
		{"docs/design.md", ""},
		{"docs/nothing.md", "no such file"},
		{"../elsewhere/notes.md", "outside the repository"},
		{"/etc/passwd", "absolute path"},
		{"docs/design.md#how-berth-works", ""},
		{"docs/design.md#no-such-heading", "no heading"},
		{"https://example.com/x.md#y", ""},
	} {
		got := linkProblem("README.md", c.target, anchorsOf)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("link %s: problem %q, want %q", c.target, got, c.want)
		}
	}
}
