package docgen

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/berthd/berth/config"
)

// The configuration files the project ships or shows, read from the
// repository root: each must agree with the reference.
var shipped = []struct {
	path string
	// packaged: the file installed as /etc/berth/berth.toml, whose active
	// keys must say the built-in default where they differ from it.
	packaged bool
}{
	{"packaging/berth.toml", true},
	{"packaging/examples/berth.toml", false},
}

var (
	headerRE = regexp.MustCompile(`^\s*(#\s*)?\[(\[?)\s*([A-Za-z0-9_.-]+)\s*\]\]?\s*(#.*)?$`)
	assignRE = regexp.MustCompile(`^\s*(#\s*)?([A-Za-z0-9_]+)\s*=\s*(.+)$`)
)

// setting is one key assignment in a shipped file, active or commented out.
type setting struct {
	line      int
	table     string // TOML path of its table: "agent", "connector.task.limits"
	key       string
	value     any    // decoded
	raw       string // the value as written, without a trailing comment
	commented bool
	// notes are the comments that speak about this key alone: its
	// trailing comment, and the block of comment lines just above it when
	// it is the only key under that block.
	notes []string
}

// scan reads a TOML text and returns every assignment, active or commented
// out ("# key = value" that is valid TOML on its own), and the text with
// the commented-out headers and assignments made active.
func scan(name, text string) ([]setting, string, error) {
	var (
		out       []setting
		active    []string
		table     string
		block     []string // comment lines since the last code or blank line
		run       []int    // indices in out of the assignments under block
		runBlock  []string
		inArrayOf = map[string]bool{}
	)
	flush := func() {
		if len(run) == 1 {
			out[run[0]].notes = append(out[run[0]].notes, runBlock...)
		}
		run, runBlock = nil, nil
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if m := headerRE.FindStringSubmatch(line); m != nil && (m[1] == "" || !strings.Contains(m[3], " ")) {
			flush()
			block = nil
			table = m[3]
			if m[2] == "[" {
				inArrayOf[table] = true
			}
			active = append(active, strings.TrimPrefix(trimmed, "#"))
			continue
		}
		if m := assignRE.FindStringSubmatch(line); m != nil {
			var v map[string]any
			code := m[2] + " = " + m[3]
			if _, err := toml.Decode(code, &v); err == nil {
				raw, trailing := m[3], ""
				if j := strings.Index(raw, " #"); j >= 0 {
					if _, err := toml.Decode(m[2]+" = "+raw[:j], &v); err == nil {
						raw, trailing = strings.TrimSpace(raw[:j]), raw[j+2:]
					}
				}
				if len(run) == 0 {
					runBlock = block
				}
				block = nil
				s := setting{line: i + 1, table: table, key: m[2], value: v[m[2]], raw: raw, commented: m[1] != ""}
				if trailing != "" {
					s.notes = append(s.notes, trailing)
				}
				out = append(out, s)
				run = append(run, len(out)-1)
				active = append(active, code)
				continue
			}
		}
		if strings.HasPrefix(trimmed, "#") {
			if len(run) > 0 {
				flush()
			}
			block = append(block, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
		} else if trimmed == "" {
			flush()
			block = nil
		} else {
			return nil, "", fmt.Errorf("%s:%d: neither a header, an assignment nor a comment: %q", name, i+1, line)
		}
		active = append(active, "")
	}
	flush()
	return out, strings.Join(active, "\n"), nil
}

// section returns the reference's section for a table path.
func section(table string) (config.Section, error) {
	s, _ := config.LookupSection(config.SectionFile)
	if table == "" {
		return s, nil
	}
	for _, part := range strings.Split(table, ".") {
		k, ok := s.Lookup(part)
		if !ok || (k.Type != config.TypeTable && k.Type != config.TypeTables) {
			return config.Section{}, fmt.Errorf("[%s]: %q is not a table of section %s", table, part, s.ID)
		}
		s, _ = config.LookupSection(k.Section)
	}
	return s, nil
}

// checkKeys checks that key (with value v) is a key of sec, and, for an
// inline table, that its keys are keys of the sub-section.
func checkKeys(sec config.Section, key string, v any) (config.Key, error) {
	k, ok := sec.Lookup(key)
	if !ok {
		return k, fmt.Errorf("%s is not a key of %s", key, strings.Join(append([]string{sec.ID}, sec.Headers...), " "))
	}
	var tables []map[string]any
	switch x := v.(type) {
	case map[string]any:
		tables = []map[string]any{x}
	case []map[string]any:
		tables = x
	case []any:
		for _, e := range x {
			if m, ok := e.(map[string]any); ok {
				tables = append(tables, m)
			}
		}
	}
	if len(tables) > 0 && k.Section != "" {
		sub, _ := config.LookupSection(k.Section)
		for _, m := range tables {
			for name, inner := range m {
				if _, err := checkKeys(sub, name, inner); err != nil {
					return k, fmt.Errorf("%s: %w", key, err)
				}
			}
		}
	}
	return k, nil
}

// mentionsDefault reports whether note speaks of the key's default, and
// whether what it says is right.
func mentionsDefault(k config.Key, note string) (mentions, right bool) {
	if !strings.Contains(strings.ToLower(note), "default") {
		return false, false
	}
	for _, want := range []string{k.Default, strings.Trim(k.Default, `"`), k.DefaultNote} {
		if want != "" && strings.Contains(note, want) {
			return true, true
		}
	}
	return true, false
}

// checkShipped checks one configuration text against the reference: it
// validates with every commented-out example made active; every key,
// active or commented, is a key of its table; a comment about one key that
// speaks of its default names the documented one; and, for the packaged
// file, an active key set to something else than its default says what
// the default is.
func checkShipped(name, text string, packaged bool) (problems []string) {
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	settings, uncommented, err := scan(name, text)
	if err != nil {
		return []string{err.Error()}
	}
	if len(settings) == 0 {
		return []string{name + ": no key found"}
	}
	if _, err := config.Parse(name, []byte(text), nil); err != nil {
		errorf("%s does not validate:\n%v", name, err)
	}
	if _, err := config.Parse(name+" (examples uncommented)", []byte(uncommented), nil); err != nil {
		errorf("%s with its commented-out examples made active does not validate:\n%v\n%s", name, err, uncommented)
	}
	for _, s := range settings {
		where := fmt.Sprintf("%s:%d: %s", name, s.line, s.key)
		sec, err := section(s.table)
		if err != nil {
			errorf("%s: %v", where, err)
			continue
		}
		k, err := checkKeys(sec, s.key, s.value)
		if err != nil {
			errorf("%s: %v", where, err)
			continue
		}
		for _, n := range s.notes {
			if mentions, right := mentionsDefault(k, n); mentions && !right {
				want := k.Default
				if want == "" {
					want = k.DefaultNote
				}
				errorf("%s: the comment %q speaks of a default; the reference's is %s", where, n, want)
			}
		}
		if packaged && !s.commented && k.Default != "" && !sameValue(s.key, s.raw, k.Default) {
			said := false
			for _, n := range s.notes {
				if mentions, right := mentionsDefault(k, n); mentions && right {
					said = true
				}
			}
			if !said {
				errorf("%s = %s differs from the built-in default %s, and no comment about it says so", where, s.raw, k.Default)
			}
		}
	}
	return problems
}

// sameValue reports whether two TOML values of key decode alike.
func sameValue(key, a, b string) bool {
	var va, vb map[string]any
	_, errA := toml.Decode(key+" = "+a, &va)
	_, errB := toml.Decode(key+" = "+b, &vb)
	return errA == nil && errB == nil && fmt.Sprint(va) == fmt.Sprint(vb)
}

func TestShippedConfigsAgreeWithReference(t *testing.T) {
	for _, f := range shipped {
		t.Run(filepath.Base(filepath.Dir(f.path))+"/"+filepath.Base(f.path), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "..", f.path))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range checkShipped(f.path, string(b), f.packaged) {
				t.Error(p)
			}
		})
	}
}

// The TOML examples of every Markdown file (the README and docs/) are
// checked the same way.
func TestMarkdownConfigsAgreeWithReference(t *testing.T) {
	block := regexp.MustCompile("(?s)```toml\n(.*?)\\s*```")
	n := 0
	for _, file := range markdownFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range block.FindAllStringSubmatch(string(b), -1) {
			n++
			var lines []string
			for _, l := range strings.Split(m[1], "\n") {
				lines = append(lines, strings.TrimPrefix(l, "   ")) // blocks inside a list item are indented
			}
			for _, p := range checkShipped(fmt.Sprintf("%s toml block %d", file, i+1), strings.Join(lines, "\n"), false) {
				t.Error(p)
			}
		}
	}
	if n < 3 {
		t.Errorf("found only %d toml blocks in the Markdown files", n)
	}
}

// The checker itself catches what it is for.
func TestCheckerCatches(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"unknown commented key", "[agent]\n# lisen = \"127.0.0.1:1\"\n", "lisen is not a key"},
		{"unknown key in a commented inline table", "[[connector]]\nname = \"a\"\n# [connector.run]\n# limits = { cpu = 1, mem = \"1MiB\" }\n", "mem is not a key"},
		{"wrong default in a comment", "[agent]\n# Log files kept; default 7.\nlog_max_files = 5\n", "speaks of a default"},
		{"differs without saying", "[agent]\nstop_timeout = \"30s\"\n", "differs from the built-in default"},
		{"commented example invalid", "[agent]\n# log_sink = \"syslog\"\n", "examples made active does not validate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := strings.Join(checkShipped("x.toml", c.text, true), "\n")
			if !strings.Contains(got, c.want) {
				t.Errorf("checker on %q reported %q, want %q", c.text, got, c.want)
			}
		})
	}
}
