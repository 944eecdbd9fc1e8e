package docgen

import (
	"bytes"
	"strings"
	"testing"

	"github.com/berthd/berth/metrics"
)

// docs/metrics.md is what MetricsMarkdown writes now: a metric added,
// removed or changed in package metrics without `make docs` fails here.
func TestMetricsMarkdownFresh(t *testing.T) {
	checkFresh(t, MetricsMarkdownPath, MetricsMarkdown)
}

// Every family of the metrics reference has its row, under its collector's
// heading.
func TestMetricsMarkdownRows(t *testing.T) {
	var b bytes.Buffer
	if err := MetricsMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, c := range metrics.Reference() {
		head := strings.Index(text, "\n## `"+c.Name+"`\n")
		if head < 0 {
			t.Errorf("no heading for collector %s", c.Name)
			continue
		}
		for _, f := range c.Families {
			row := strings.Index(text, "| `"+f.Name+"` | "+f.Type+" |")
			if row < head {
				t.Errorf("%s: no row of type %s under collector %s", f.Name, f.Type, c.Name)
			}
		}
	}
}
