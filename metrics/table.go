package metrics

import (
	"bufio"
	"math"
	"strconv"
	"strings"
)

// A jobFamily is one per-job metric family: its samples are labelled
// job_id, connector, kind and group, plus at most one more
// label whose values are fixed (mode = user|system, state = …). Per-job
// samples do not go through client_golang's Registry: with tens of
// thousands of series per scrape, building a prometheus.Metric per sample,
// then a dto.Metric, hashing it for consistency, sorting every family and
// escaping every label value again took more CPU than reading the kernel's
// files. A scrape writes them into a jobTable instead, and the table is
// written straight in the text exposition format, each job's label text
// escaped once per scrape.
type jobFamily struct {
	name, help string
	typ        string   // "counter" or "gauge"
	extra      string   // the extra label's name; "" for none
	values     []string // the extra label's values, in output order
	idx        int      // position in jobFamilies
}

// jobFamilies are every per-job family, in output order.
var jobFamilies []*jobFamily

// newJobFamily declares a per-job family; extra and values name the extra
// label and its possible values (none when extra is "").
func newJobFamily(name, help, typ, extra string, values ...string) *jobFamily {
	if extra != "" && extra >= "connector" && extra <= "kind" {
		panic("metrics: " + name + ": extra label " + extra + " must sort before connector or after kind")
	}
	if extra == "" {
		values = []string{""}
	}
	f := &jobFamily{name: name, help: help, typ: typ, extra: extra, values: values, idx: len(jobFamilies)}
	jobFamilies = append(jobFamilies, f)
	return f
}

func jobCounter(name, help string) *jobFamily { return newJobFamily(name, help, "counter", "") }
func jobGauge(name, help string) *jobFamily   { return newJobFamily(name, help, "gauge", "") }

// value is the index of an extra label value of f; it panics on a value f
// does not declare (a programming error).
func (f *jobFamily) value(v string) int {
	for i, x := range f.values {
		if x == v {
			return i
		}
	}
	panic("metrics: " + f.name + " has no " + f.extra + " " + v)
}

// jobTable holds one scrape's per-job samples: for each family, a value
// and a set flag per (job, extra label value), indexed by the job's
// position in the Snapshot. A job's cells are written only by the
// goroutine that reads that job, so collectors fill it concurrently
// without locks. It is reused from scrape to scrape: its size follows the
// number of jobs, never the history.
type jobTable struct {
	jobs []Job
	vals [][]float64 // per family: len(jobs) × len(values)
	set  [][]bool
	// labels holds every job's label text, `connector="…",group="…",
	// job_id="…",kind="…"`, escaped; job i's is labels[ends[i-1]:ends[i]].
	labels []byte
	ends   []int
}

// reset prepares t for a scrape of jobs: every cell unset.
func (t *jobTable) reset(jobs []Job) {
	t.jobs = jobs
	if t.vals == nil {
		t.vals = make([][]float64, len(jobFamilies))
		t.set = make([][]bool, len(jobFamilies))
	}
	for i, f := range jobFamilies {
		n := len(jobs) * len(f.values)
		if cap(t.vals[i]) < n {
			t.vals[i] = make([]float64, n)
			t.set[i] = make([]bool, n)
		}
		t.vals[i] = t.vals[i][:n]
		t.set[i] = t.set[i][:n]
		clear(t.set[i])
	}
	t.labels, t.ends = t.labels[:0], t.ends[:0]
	// Labels in name order, as client_golang writes them (an extra
	// label's name sorts before "connector" or after "kind": write puts
	// it first or last).
	for i := range jobs {
		j := &jobs[i]
		t.labels = append(t.labels, `connector="`...)
		t.labels = appendEscaped(t.labels, j.Connector)
		t.labels = append(t.labels, `",group="`...)
		t.labels = appendEscaped(t.labels, j.Group)
		t.labels = append(t.labels, `",job_id="`...)
		t.labels = appendEscaped(t.labels, j.ID)
		t.labels = append(t.labels, `",kind="`...)
		t.labels = appendEscaped(t.labels, j.Kind)
		t.labels = append(t.labels, '"')
		t.ends = append(t.ends, len(t.labels))
	}
}

// put sets job i's sample of f (extra label value index e) to v.
func (t *jobTable) put(f *jobFamily, i, e int, v float64) {
	k := i*len(f.values) + e
	t.vals[f.idx][k], t.set[f.idx][k] = v, true
}

// write writes every family with at least one sample in the text
// exposition format (version 0.0.4): HELP and TYPE once, then one line
// per sample, jobs in Snapshot order.
func (t *jobTable) write(w *bufio.Writer) error {
	var line []byte
	for _, f := range jobFamilies {
		set := t.set[f.idx]
		any := false
		for _, s := range set {
			if s {
				any = true
				break
			}
		}
		if !any {
			continue
		}
		line = append(line[:0], "# HELP "...)
		line = append(line, f.name...)
		line = append(line, ' ')
		line = appendHelp(line, f.help)
		line = append(line, "\n# TYPE "...)
		line = append(line, f.name...)
		line = append(line, ' ')
		line = append(line, f.typ...)
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
		vals := t.vals[f.idx]
		for i := range t.jobs {
			start := 0
			if i > 0 {
				start = t.ends[i-1]
			}
			for e, ev := range f.values {
				k := i*len(f.values) + e
				if !set[k] {
					continue
				}
				line = append(line[:0], f.name...)
				line = append(line, '{')
				if f.extra != "" && f.extra < "connector" {
					line = append(line, f.extra...)
					line = append(line, `="`...)
					line = appendEscaped(line, ev)
					line = append(line, `",`...)
				}
				line = append(line, t.labels[start:t.ends[i]]...)
				if f.extra > "kind" {
					line = append(line, ',')
					line = append(line, f.extra...)
					line = append(line, `="`...)
					line = appendEscaped(line, ev)
					line = append(line, '"')
				}
				line = append(line, "} "...)
				line = appendFloat(line, vals[k])
				line = append(line, '\n')
				if _, err := w.Write(line); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// appendEscaped appends a label value escaped as the text format wants:
// backslash, double quote and line feed.
func appendEscaped(b []byte, s string) []byte {
	if !strings.ContainsAny(s, "\\\"\n") {
		return append(b, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '"':
			b = append(b, `\"`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendHelp appends a HELP text escaped: backslash and line feed.
func appendHelp(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendFloat formats v as client_golang's text encoder does
// (strconv.AppendFloat(b, v, 'g', -1, 64)). A whole number of fewer than
// seven digits, most samples of a scrape (processes, threads, fds, tasks),
// is written as an integer, which is what 'g' writes for it, at a
// fraction of the cost; 'g' writes larger ones with an exponent.
func appendFloat(b []byte, v float64) []byte {
	if v > -1e6 && v < 1e6 && v == float64(int64(v)) && (v != 0 || !math.Signbit(v)) {
		return strconv.AppendInt(b, int64(v), 10)
	}
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
