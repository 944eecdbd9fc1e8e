package metrics

import (
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// A Family is one metric family the agent may serve on /metrics, as the
// metrics reference (docs/metrics.md) lists it.
type Family struct {
	// Name is the family's name, such as "berth_job_cpu_seconds_total".
	Name string
	// Type is "counter", "gauge" or "histogram".
	Type string
	// Help is the HELP text a scrape serves; it names the unit.
	Help string
	// Labels are the family's label names, sorted.
	Labels []string
	// Values are the fixed values of the family's one label beyond job_id,
	// connector, kind and group (mode: user, system), in output order; nil
	// when it has none.
	Values []string
}

// A CollectorRef is one collector of the agent's exporter and the families
// it serves.
type CollectorRef struct {
	// Name is the collector's name, the value of the collector label of
	// berth_scrape_collector_duration_seconds and _success; "exporter" for
	// the exporter's own families.
	Name string
	// Source says where the collector's numbers come from.
	Source string
	// Families are the collector's families, in the order it declares them.
	Families []Family
}

// reference lists every family by collector. A family declared in this
// package and missing here fails TestReferenceComplete.
func reference() []struct {
	name, source string
	fams         []any // *jobFamily, *prometheus.Desc, or prometheus.Collector of one family
} {
	cm := newClusterMetrics()
	return []struct {
		name, source string
		fams         []any
	}{
		{"agent", "what the agent knows of each job (state, restarts, memory pressure actions, held-back definitions), the assignment it runs and its last reload; reads no file",
			[]any{famUp, famState, famRestarts, famPressure, famBlocked, descJobs, descGeneration, descUnassigned, descReloadOK, descReloadTime}},
		{"cgroup", "each job's cgroup: the kernel's CPU, memory, OOM and pids accounting, and the limits berth wrote",
			[]any{famCPU, famThrottled, famThrottledN, famCPULimit, famMem, famMemLimit, famOOM, famPids}},
		{"procfs", "/proc/PID/stat, io and status of every process of each job, summed per job; counters keep what exited processes counted",
			[]any{famProcs, famRSS, famThreads, famFDs, famReadBytes, famWriteBytes, famCtxSwitches}},
		{"pressure", "each job's pressure stall information (cpu.pressure, memory.pressure, io.pressure; Documentation/accounting/psi.rst); absent on a kernel without PSI",
			[]any{famCPUWaiting, famCPUStalled, famMemWaiting, famMemStalled, famIOWaiting, famIOStalled}},
		{"group", "each sharing group's parent cgroup: its jobs on this agent together, and the group's limits",
			[]any{descGroupJobs, valued{descGroupCPU, []string{"user", "system"}}, descGroupCPULimit, descGroupThrottled, descGroupMem, descGroupMemLimit, descGroupOOM, descGroupPids, descGroupPidsLimit, valued{descGroupIO, []string{"read", "write"}}}},
		{"cluster", "the agent's membership: its session lease, renewals, fencings and declaration conflicts",
			[]any{descMemberUp, descConflicts, descRenewal, descDeadline, cm.renew, descFencings}},
		{"exporter", "the exporter itself: how long each collector's read took and whether it succeeded, as node_exporter reports its collectors",
			[]any{descCollectDur, descCollectOK}},
	}
}

// Reference returns every collector of the agent's exporter with the
// families it serves, in the order the reference lists them. It panics
// when a listed descriptor cannot be described (a programming error).
func Reference() []CollectorRef {
	var out []CollectorRef
	for _, c := range reference() {
		ref := CollectorRef{Name: c.name, Source: c.source}
		for _, f := range c.fams {
			ref.Families = append(ref.Families, describe(f))
		}
		out = append(out, ref)
	}
	return out
}

// describe returns the Family of a *jobFamily, a *prometheus.Desc or a
// prometheus.Collector of one family (a client_golang Counter or
// Histogram).
func describe(f any) Family {
	switch f := f.(type) {
	case *jobFamily:
		labels := []string{"connector", "group", "job_id", "kind"}
		var values []string
		switch {
		case f.extra != "" && f.extra < "connector":
			labels = append([]string{f.extra}, labels...)
			values = f.values
		case f.extra != "":
			labels = append(labels, f.extra)
			values = f.values
		}
		return Family{Name: f.name, Type: f.typ, Help: f.help, Labels: labels, Values: values}
	case *prometheus.Desc:
		return describeDesc(f, typeByName)
	case valued:
		fam := describeDesc(f.desc, typeByName)
		fam.Values = f.values
		return fam
	case prometheus.Histogram:
		return describeCollector(f, "histogram")
	case prometheus.Counter:
		return describeCollector(f, "counter")
	}
	panic(fmt.Sprintf("metrics: cannot describe %T", f))
}

// valued is a descriptor whose label beyond group takes fixed values.
type valued struct {
	desc   *prometheus.Desc
	values []string
}

// typeByName is the type a plain descriptor's family has by Prometheus'
// naming conventions: a counter's name ends in _total, every other plain
// descriptor here is a gauge (TestReferenceTypes checks it on a scrape).
func typeByName(name string) string {
	if strings.HasSuffix(name, "_total") {
		return "counter"
	}
	return "gauge"
}

// describeDesc reads d's name, help and label names the way a scrape reads
// them: one sample of d, with empty label values, gathered by a registry.
func describeDesc(d *prometheus.Desc, typ func(string) string) Family {
	for n := 0; n <= 8; n++ {
		m, err := prometheus.NewConstMetric(d, prometheus.UntypedValue, 0, make([]string, n)...)
		if err != nil {
			continue
		}
		fam := gatherOne(single{m})
		fam.Type = typ(fam.Name)
		return fam
	}
	panic("metrics: cannot describe " + d.String())
}

// describeCollector reads the one family of c.
func describeCollector(c prometheus.Collector, typ string) Family {
	fam := gatherOne(c)
	fam.Type = typ
	return fam
}

// gatherOne gathers c, which serves one family, and returns its name, help
// and label names.
func gatherOne(c prometheus.Collector) Family {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		panic("metrics: describe: " + err.Error())
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) == 0 {
		panic(fmt.Sprintf("metrics: describe: %d families, %v", len(mfs), err))
	}
	fam := Family{Name: mfs[0].GetName(), Help: mfs[0].GetHelp()}
	for _, l := range mfs[0].GetMetric()[0].GetLabel() {
		fam.Labels = append(fam.Labels, l.GetName())
	}
	sort.Strings(fam.Labels)
	return fam
}

// single is a prometheus.Collector of one metric.
type single struct{ m prometheus.Metric }

func (s single) Describe(ch chan<- *prometheus.Desc) { ch <- s.m.Desc() }
func (s single) Collect(ch chan<- prometheus.Metric) { ch <- s.m }
