package docgen

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// ManDate is the date man pages carry: SOURCE_DATE_EPOCH (seconds since
// the epoch, https://reproducible-builds.org/specs/source-date-epoch/)
// when set, so that a build is reproducible, else now. It returns an error
// when SOURCE_DATE_EPOCH is set but not an integer.
func ManDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Now().UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not seconds since the epoch: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// longEscaper keeps a command's help text literal when cobra/doc renders
// it as Markdown: "<log_dir>" would otherwise be read as an HTML tag and
// dropped.
var longEscaper = strings.NewReplacer(`\`, `\\`, `<`, `\<`, `>`, `\>`, `*`, `\*`, "`", "\\`")

// manMarkdown turns a command's long help (plain text) into the Markdown
// cobra/doc renders: lines indented by two spaces or more (tables, lists
// of columns) become a code block, kept as written; the other lines are
// escaped.
func manMarkdown(long string) string {
	lines := strings.Split(long, "\n")
	out := make([]string, 0, len(lines)+4)
	inBlock := false
	for _, l := range lines {
		indented := strings.HasPrefix(l, "  ") && strings.TrimSpace(l) != ""
		switch {
		case indented && !inBlock:
			if len(out) > 0 && out[len(out)-1] != "" {
				out = append(out, "")
			}
			inBlock = true
		case !indented && inBlock && strings.TrimSpace(l) != "":
			out = append(out, "")
			inBlock = false
		}
		if inBlock {
			out = append(out, "  "+l)
			continue
		}
		out = append(out, longEscaper.Replace(l))
	}
	return strings.Join(out, "\n")
}

// ManPages writes one man page per available command of root into dir
// (berth.1, berth-agent.1, ...; cobra/doc.GenManTree) and berth.toml(5)
// (ConfigMan), dated date, with source as their source ("berth 1.2.3"). It
// escapes the commands' long help for Markdown in place, so root must not
// be used to run commands afterwards. Errors: dir cannot be made or a page
// cannot be written.
func ManPages(root *cobra.Command, dir string, date time.Time, source string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Long = manMarkdown(c.Long)
		c.DisableAutoGenTag = true
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root.InitDefaultCompletionCmd()
	walk(root)
	root.Long += "\n\nThe agent file and connector definitions are described in berth.toml(5)."
	header := &doc.GenManHeader{Section: "1", Date: &date, Source: source, Manual: "berth manual"}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return fmt.Errorf("man pages in %s: %w", dir, err)
	}
	f, err := os.Create(filepath.Join(dir, "berth.toml.5"))
	if err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	if err := ConfigMan(f, date, source); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	return nil
}
