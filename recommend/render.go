package recommend

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// Target is one job to render: its recommendation, where its limits live
// in the configuration (its connector, and whether it is the connector's
// own job, [connector.run], or one of its tasks, [connector.task]), and
// the limits in force (kept for the keys a recommendation does not set).
type Target struct {
	Connector string
	Kind      spec.Kind
	Current   limits.Limits
	Rec       Recommendation
}

// Render writes the recommendations as TOML that berth's configuration
// accepts: per connector, a [connector.run.limits] table for its own job
// and a [connector.task.limits] table for its tasks (one template for
// them all, so sized for the largest of each resource), each to replace
// the connector's table (or inline limits = { … }) of that name. Keys a
// recommendation does not set (cpu_period, cpu_weight, cpuset,
// memory_low, memory_swap, pids, io_weight, io) keep the values in force
// (memory_low only while at most memory and memory_high, else it is
// left out, in a comment); so do cpu
// and memory when there is no sample for them. The evidence goes in
// comments. now is the time named in the header.
//
// memory_high is written where the host enforces it (v2); on v1, where
// berth's memory_high is only the memory_pressure action's threshold, it
// is written only when the job has one in force, else as a comment.
//
// Errors: those of w.
func Render(w io.Writer, ts []Target, host Host, now time.Time) error {
	bw := bufio.NewWriter(w)
	groups := map[string][]Target{}
	var names []string
	for _, t := range ts {
		if groups[t.Connector] == nil {
			names = append(names, t.Connector)
		}
		groups[t.Connector] = append(groups[t.Connector], t)
	}
	slices.Sort(names)
	for i, name := range names {
		if i > 0 {
			bw.WriteString("\n")
		}
		fmt.Fprintf(bw, "# connector %s: berth recommend, %s\n", name, now.UTC().Format(time.RFC3339))
		var run, tasks []Target
		for _, t := range groups[name] {
			if t.Kind == spec.KindTask {
				tasks = append(tasks, t)
			} else {
				run = append(run, t)
			}
		}
		slices.SortFunc(tasks, func(a, b Target) int { return strings.Compare(a.Rec.Job, b.Rec.Job) })
		if len(run) > 0 {
			renderTable(bw, "connector.run.limits", run[:1], host)
		}
		if len(tasks) > 0 {
			if len(run) > 0 {
				bw.WriteString("\n")
			}
			renderTable(bw, "connector.task.limits", tasks, host)
		}
	}
	return bw.Flush()
}

// renderTable writes one limits table for ts, the jobs that share it.
func renderTable(w *bufio.Writer, table string, ts []Target, host Host) {
	kind := "the connector's own job"
	if len(ts) > 1 || ts[0].Kind == spec.KindTask {
		kind = "its tasks (one template: sized for the largest)"
	}
	fmt.Fprintf(w, "# For %s: replace the [%s] table (or the inline limits = { … }) with this one, then berth reload (limits change in place).\n", kind, table)
	for _, t := range ts {
		writeEvidence(w, t.Rec)
	}
	cur := ts[0].Current
	// The largest of each resource, and which job it is.
	var cpu, mem, high Target
	for _, t := range ts {
		if t.Rec.CPU > cpu.Rec.CPU {
			cpu = t
		}
		if t.Rec.Memory > mem.Rec.Memory {
			mem = t
		}
		if t.Rec.MemoryHigh > high.Rec.MemoryHigh {
			high = t
		}
	}
	fmt.Fprintf(w, "[%s]\n", table)
	line := func(key, value, comment string) {
		kv := key + " = " + value
		if comment == "" {
			fmt.Fprintln(w, kv)
			return
		}
		fmt.Fprintf(w, "%-24s # %s\n", kv, comment)
	}
	who := func(t Target) string {
		if len(ts) > 1 {
			return " (" + t.Rec.Job + ")"
		}
		return ""
	}
	switch {
	case cpu.Rec.CPU > 0:
		e := cpu.Rec.Evidence
		line("cpu", strconv.FormatFloat(cpu.Rec.CPU, 'f', -1, 64),
			fmt.Sprintf("P%s %.3f of load + %s %%, rounded up%s", pctName(cpu.Rec.Rule), e.CPUTarget, percent(cpu.Rec.Rule.CPUMargin), who(cpu)))
	case cur.CPU > 0:
		line("cpu", strconv.FormatFloat(cur.CPU, 'f', -1, 64), "kept: no CPU samples")
	}
	if cur.CPUPeriod != 0 && (cpu.Rec.CPU > 0 || cur.CPU > 0) {
		line("cpu_period", strconv.Quote(cur.CPUPeriod.String()), "kept")
	}
	if cur.CPUWeight != 0 {
		line("cpu_weight", strconv.FormatUint(cur.CPUWeight, 10), "kept")
	}
	if cur.Cpuset != "" {
		line("cpuset", tomlString(cur.Cpuset), "kept")
	}
	var written int64 // the memory written, 0 for none
	switch {
	case mem.Rec.Memory > 0:
		written = mem.Rec.Memory
		line("memory", tomlBytes(mem.Rec.Memory),
			fmt.Sprintf("peak %s + %.1f %%%s", human(float64(mem.Rec.Evidence.MemoryPeak)), 100*mem.Rec.MemorySlack(), who(mem)))
	case cur.Memory > 0:
		written = cur.Memory
		line("memory", tomlBytes(cur.Memory), "kept: no memory samples")
	}
	var writtenHigh int64 // the memory_high written, 0 for none
	switch {
	case high.Rec.MemoryHigh > 0 && (host.MemoryHigh || cur.MemoryHigh > 0):
		comment := "above every peak, below memory: reclaim and throttling come before the OOM kill"
		if !host.MemoryHigh {
			comment = "the memory_pressure threshold (cgroup v1 does not enforce it)"
		}
		writtenHigh = high.Rec.MemoryHigh
		line("memory_high", tomlBytes(high.Rec.MemoryHigh), comment+who(high))
	case high.Rec.MemoryHigh > 0:
		fmt.Fprintf(w, "# memory_high = %s would be the threshold of memory_pressure = \"restart\" (cgroup v1 does not enforce it)\n", tomlBytes(high.Rec.MemoryHigh))
	case cur.MemoryHigh > 0 && (written == 0 || cur.MemoryHigh <= written):
		writtenHigh = cur.MemoryHigh
		line("memory_high", tomlBytes(cur.MemoryHigh), "kept")
	}
	// memory_low may be at most memory and memory_high (limits' bounds).
	switch {
	case cur.MemoryLow > 0 && (written == 0 || cur.MemoryLow <= written) && (writtenHigh == 0 || cur.MemoryLow <= writtenHigh):
		line("memory_low", tomlBytes(cur.MemoryLow), "kept")
	case cur.MemoryLow > 0:
		fmt.Fprintf(w, "# memory_low = %s left out: above the recommended memory or memory_high\n", tomlBytes(cur.MemoryLow))
	}
	if cur.MemorySwap > 0 && written > 0 {
		line("memory_swap", tomlBytes(cur.MemorySwap), "kept")
	}
	if cur.Pids > 0 {
		line("pids", strconv.FormatInt(cur.Pids, 10), "kept")
	}
	if cur.IOWeight != 0 {
		line("io_weight", strconv.FormatUint(cur.IOWeight, 10), "kept")
	}
	if len(cur.IO) > 0 {
		var b strings.Builder
		b.WriteString("[")
		for i, io := range cur.IO {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("{ device = " + tomlString(io.Device))
			for _, r := range []struct {
				key   string
				v     int64
				bytes bool
			}{{"read_bps", io.ReadBPS, true}, {"write_bps", io.WriteBPS, true}, {"read_iops", io.ReadIOPS, false}, {"write_iops", io.WriteIOPS, false}} {
				if r.v == 0 {
					continue
				}
				v := strconv.FormatInt(r.v, 10)
				if r.bytes {
					v = tomlBytes(r.v)
				}
				b.WriteString(", " + r.key + " = " + v)
			}
			b.WriteString(" }")
		}
		b.WriteString("]")
		line("io", b.String(), "kept")
	}
}

// writeEvidence writes r's evidence and notes as comment lines.
func writeEvidence(w *bufio.Writer, r Recommendation) {
	e := r.Evidence
	fmt.Fprintf(w, "# %s: %s of samples from %s to %s (%d CPU, %d memory)\n", r.Job,
		time.Duration(e.SampledSeconds*1e9).Round(time.Second), e.Since.UTC().Format(time.RFC3339), e.Until.UTC().Format(time.RFC3339),
		e.CPUSamples, e.MemorySamples)
	if e.CPUSamples > 0 {
		throttled := "no CFS periods counted (no cpu limit in force)"
		if e.Periods > 0 {
			throttled = fmt.Sprintf("throttled in %d of %d CFS periods (%.2f %%)", e.ThrottledPeriods, e.Periods, 100*e.ThrottledShare())
		}
		fmt.Fprintf(w, "#   cpu: P90 %.3f (of time), P%s %.3f (of load), max %.3f cores; %s\n",
			e.CPUP90, pctName(r.Rule), e.CPUTarget, e.CPUMax, throttled)
	}
	if e.MemoryPeak > 0 {
		oom := ""
		if e.MemoryPeakOOM {
			oom = " (from an OOM kill)"
		}
		fmt.Fprintf(w, "#   memory: peak %s%s at %s, P90 %s; %d OOM kills\n", human(float64(e.MemoryPeak)), oom,
			e.MemoryPeakAt.UTC().Format(time.RFC3339), human(float64(e.MemoryP90)), e.OOMKills)
	}
	if e.HasPressure {
		fmt.Fprintf(w, "#   pressure stalls (PSI some): memory %.1f s, cpu %.1f s\n", e.MemoryStallSeconds, e.CPUStallSeconds)
	} else if e.MemorySamples > 0 {
		fmt.Fprintf(w, "#   pressure stalls: not available on this host\n")
	}
	v := r.VPA
	if v.CPU > 0 || v.Memory > 0 {
		fmt.Fprintf(w, "#   VPA's defaults on the same samples: cpu %s, memory %s (without its floors of 0.025 and 250MiB: %s, %s)\n",
			strconv.FormatFloat(v.CPU, 'f', -1, 64), human(float64(v.Memory)),
			strconv.FormatFloat(v.CPUNoFloor, 'f', -1, 64), human(float64(v.MemoryNoFloor)))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "#   note: %s\n", n)
	}
}

// pctName names the percentile cpu is sized for ("99", "99.5").
func pctName(r Rule) string { return percent(r.CPUPercentile) }

// percent is the fraction f in percent, as few digits as it takes ("15").
func percent(f float64) string { return strconv.FormatFloat(math.Round(f*1e4)/1e2, 'f', -1, 64) }

// tomlString quotes s as a TOML basic string: backslash, quote and
// control characters escaped (TOML v1.0.0, "String").
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlBytes is b as a TOML byte size berth reads: a quoted size in the
// largest IEC unit that divides it ("80MiB"), else an integer of bytes.
func tomlBytes(b int64) string {
	if s := formatBytes(b); s != strconv.FormatInt(b, 10) {
		return strconv.Quote(s)
	}
	return strconv.FormatInt(b, 10)
}
