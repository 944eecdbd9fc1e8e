package docgen

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/berthd/berth/config"
	"github.com/cpuguy83/go-md2man/v2/md2man"
)

// ConfigMarkdownPath is where the configuration reference is kept,
// relative to the repository root.
const ConfigMarkdownPath = "docs/config.md"

// mdEscaper escapes the characters that Markdown (GitHub's and
// blackfriday's, which go-md2man uses) would read as markup in plain text.
var mdEscaper = strings.NewReplacer(`\`, `\\`, `|`, `\|`, `<`, `\<`, `>`, `\>`, `*`, `\*`, "`", "\\`", `[`, `\[`, `]`, `\]`)

// md escapes s for Markdown text.
func md(s string) string { return mdEscaper.Replace(s) }

// code is s as a Markdown code span, safe inside a table cell.
func code(s string) string {
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}

// title is how the reference names a section: its headers, or a plain name
// for a top level.
func title(s config.Section) string {
	switch s.ID {
	case config.SectionFile:
		return "The agent file"
	case config.SectionDefinitions:
		return "A connectors file"
	}
	return strings.Join(s.Headers, ", ")
}

// titleMD is a section's title in Markdown: its headers as code.
func titleMD(s config.Section) string {
	if len(s.Headers) == 0 {
		return md(title(s))
	}
	hs := make([]string, len(s.Headers))
	for i, h := range s.Headers {
		hs[i] = code(h)
	}
	return strings.Join(hs, ", ")
}

// anchor is the GitHub heading anchor of a section's title.
func anchor(s config.Section) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title(s)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// defaultText is what the reference says about an absent key.
func defaultText(k config.Key) string {
	switch {
	case k.Required:
		return "required"
	case k.Default != "":
		return code(k.Default)
	case k.DefaultNote != "":
		return md(k.DefaultNote)
	}
	return ""
}

// boundsText is the accepted values of k beyond its type.
func boundsText(k config.Key) string {
	var parts []string
	if k.Values != nil {
		vs := make([]string, len(k.Values))
		for i, v := range k.Values {
			vs[i] = code(fmt.Sprintf("%q", v))
		}
		parts = append(parts, strings.Join(vs, ", "))
	}
	if k.Range != nil {
		parts = append(parts, md(k.Range.String()))
	}
	if k.Bounds != "" {
		parts = append(parts, md(k.Bounds))
	}
	return strings.Join(parts, "; ")
}

// typeText is k's type, linking a table to its section.
func typeText(k config.Key) string {
	if k.Type == config.TypeTable || k.Type == config.TypeTables {
		s, _ := config.LookupSection(k.Section)
		return fmt.Sprintf("%s, [%s](#%s)", k.Type, titleMD(s), anchor(s))
	}
	return string(k.Type)
}

// configIntro is the text before the sections, in both renderings.
const configIntro = `berth reads one agent file, ` + "`/etc/berth/berth.toml`" + ` by default (` + "`--config`" + `),
and connector definitions from the cluster store, where ` + "`berth apply -f FILE`" + ` puts
them. Every key is validated when the file is read: an unknown key, a wrong
type, a bad unit or an impossible limit is an error ` + "`FILE:LINE:COL: key: message`" + `,
every error is listed, and the agent does not start (on reload: keeps its
running configuration untouched). ` + "`berth validate --config FILE`" + ` checks a file.

Units: byte sizes are a string with a unit (` + "`\"512MiB\"`" + `; ` + "`KiB MiB GiB TiB`" + ` are
powers of 1024, ` + "`K M G T`" + ` and ` + "`kB MB GB TB`" + ` powers of 1000, so ` + "`\"1G\"`" + ` is 10^9
bytes where systemd's ` + "`MemoryMax=1G`" + ` is 2^30: validation warns and suggests
` + "`\"1GiB\"`" + `) or an integer number of bytes; a rate in bytes per second is written
the same way (` + "`write_bps = \"20MiB\"`" + `); I/O operations per second are an
integer (` + "`write_iops = 500`" + `); durations are Go durations (` + "`\"10s\"`" + `, ` + "`\"1m30s\"`" + `,
` + "`\"500ms\"`" + `); cores are a number (` + "`cpu = 1.5`" + `).
`

// ConfigMarkdown writes the configuration reference, docs/config.md: every
// section of config.Sections with a table of its keys (type, default,
// unit, bounds, meaning), then a file that sets every key. The output
// depends only on the config package, so a test can tell a stale file.
func ConfigMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("<!-- Generated from config/keys.go by `make docs`; do not edit. A test fails when this file is stale. -->\n\n")
	b.WriteString(configIntro)
	b.WriteString("\nThe same reference is the man page berth.toml(5).\n\n")
	for _, s := range config.Sections() {
		fmt.Fprintf(&b, "- [%s](#%s)\n", titleMD(s), anchor(s))
	}
	b.WriteString("- [Every key set](#every-key-set)\n")
	for _, s := range config.Sections() {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", titleMD(s), md(s.Doc))
		b.WriteString("| key | type | default | unit | accepted | meaning |\n|---|---|---|---|---|---|\n")
		for _, k := range s.Keys {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", k.Name, typeText(k), defaultText(k), md(k.Unit), boundsText(k), md(k.Doc))
		}
	}
	b.WriteString("\n## Every key set\n\nA file that sets every key (it validates; a test checks that):\n\n```toml\n")
	b.WriteString(config.ExampleFile())
	b.WriteString("```\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// ConfigMan writes berth.toml(5), the same reference as a man page (roff,
// rendered from Markdown by go-md2man): one tagged paragraph per key.
// date is the page's date and source its source ("berth 1.2.3").
func ConfigMan(w io.Writer, date time.Time, source string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%% \"BERTH.TOML\" \"5\" \"%s\" \"%s\" \"File Formats\"\n", date.Format("Jan 2006"), source)
	b.WriteString("# NAME\nberth.toml \\- berth agent configuration and connector definitions\n\n")
	b.WriteString("# SYNOPSIS\n**/etc/berth/berth.toml**\n\n")
	b.WriteString("# DESCRIPTION\n")
	b.WriteString(configIntro)
	b.WriteString("\nEach key below is given as **name** (type; default; unit; accepted values).\n\n")
	for _, s := range config.Sections() {
		fmt.Fprintf(&b, "# %s\n%s\n\n", md(title(s)), md(s.Doc))
		for _, k := range s.Keys {
			facts := []string{string(k.Type)}
			if k.Type == config.TypeTable || k.Type == config.TypeTables {
				sub, _ := config.LookupSection(k.Section)
				facts = []string{fmt.Sprintf("%s, see %s", k.Type, md(title(sub)))}
			}
			if d := defaultText(k); d != "" {
				if k.Required {
					facts = append(facts, d)
				} else {
					facts = append(facts, "default "+d)
				}
			}
			if k.Unit != "" {
				facts = append(facts, md(k.Unit))
			}
			if bt := boundsText(k); bt != "" {
				facts = append(facts, bt)
			}
			fmt.Fprintf(&b, "**%s** (%s)\n: %s\n\n", k.Name, strings.Join(facts, "; "), md(k.Doc))
		}
	}
	b.WriteString("# EXAMPLE\nA file that sets every key:\n\n```\n")
	b.WriteString(config.ExampleFile())
	b.WriteString("```\n\n")
	b.WriteString("# FILES\n**/etc/berth/berth.toml**\n: the agent file the package installs\n\n")
	b.WriteString("# SEE ALSO\n**berth(1)**, **berth-validate(1)**, **berth-apply(1)**, **systemd.resource-control(5)**\n")
	_, err := w.Write(md2man.Render([]byte(b.String())))
	return err
}
