package docgen

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/berthd/berth/metrics"
)

// MetricsMarkdownPath is where the metrics reference is kept, relative to
// the repository root.
const MetricsMarkdownPath = "docs/metrics.md"

// metricsIntro is the prose above the tables: what every family shares.
const metricsIntro = `berth serves its metrics at ` + "`GET /metrics`" + ` on ` + "`agent.listen`" + `, read when
Prometheus scrapes. The answer is the Prometheus text format (version
0.0.4), gzip-compressed when the scraper accepts it; scrapes run one at a
time. Each collector below reads one source of numbers (the last table is
the exporter's own); a collector that fails is reported by
` + "`berth_scrape_collector_success`" + ` and never fails the scrape.

- Every per-job series is labelled ` + "`job_id`" + `, ` + "`connector`" + `, ` + "`kind`" + `
  (` + "`connector`" + ` or ` + "`task`" + `) and ` + "`group`" + ` (the sharing group, empty for
  none); never ` + "`job`" + `, which Prometheus reserves for the scrape target.
- Counters never go down, even when processes of a job exit or its cgroup
  is made anew (failure case C12 in [cases.md](cases.md)).
- A family without a sample is absent: a limit that is not set, a kernel
  without PSI, a job that has no cgroup yet.
- A scrape reads only what changes (a few cgroup files per job, and
  ` + "`/proc/PID/stat`" + `, ` + "`io`" + `, ` + "`status`" + ` of each of its processes; the limits are
  those berth wrote), jobs in parallel across the cores: at 1,000 jobs it
  costs about a quarter of what prometheus-process-exporter spends on the
  same processes ([BENCHMARKS.md](../BENCHMARKS.md), ` + "`make bench-scale`" + `).
- The agent also serves the standard ` + "`go_*`" + ` and ` + "`process_*`" + ` series of its
  own process.

The alerts, recording rules and dashboard built on these metrics are in
[operating.md](operating.md#alerts-and-dashboard).
`

// MetricsMarkdown writes the metrics reference (docs/metrics.md) from the
// descriptors of package metrics (metrics.Reference): one table per
// collector with every family's name, type, labels and help text.
func MetricsMarkdown(w io.Writer) error {
	bw := bufio.NewWriter(w)
	ref := metrics.Reference()
	fmt.Fprintf(bw, "# Metrics reference\n\n")
	fmt.Fprintf(bw, "<!-- Generated from the collectors' descriptors in package metrics (metrics/reference.go) by `make docs`; do not edit. A test fails when this file is stale. -->\n\n")
	bw.WriteString(metricsIntro)
	bw.WriteString("\n")
	for _, c := range ref {
		fmt.Fprintf(bw, "- [`%s`](#%s)\n", c.Name, c.Name)
	}
	for _, c := range ref {
		fmt.Fprintf(bw, "\n## `%s`\n\n", c.Name)
		fmt.Fprintf(bw, "From %s.\n\n", md(c.Source))
		bw.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
		for _, f := range c.Families {
			fmt.Fprintf(bw, "| %s | %s | %s | %s |\n", code(f.Name), f.Type, labelsText(f), md(f.Help))
		}
	}
	return bw.Flush()
}

// labelsText is how the reference names a family's labels: "per job" for
// the four labels every per-job series has (job_id, connector, kind,
// group), then any other label, with its fixed values when it has them.
func labelsText(f metrics.Family) string {
	perJob := slices.Contains(f.Labels, "job_id")
	var parts []string
	if perJob {
		parts = append(parts, "per job")
	}
	for _, l := range f.Labels {
		if perJob && (l == "job_id" || l == "connector" || l == "kind" || l == "group") {
			continue
		}
		s := code(l)
		if len(f.Values) > 0 && l != "group" {
			vs := make([]string, len(f.Values))
			for i, v := range f.Values {
				vs[i] = code(v)
			}
			s += ": " + strings.Join(vs, ", ")
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
