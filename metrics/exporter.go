package metrics

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
)

// Collector reads one source of numbers at scrape time and sends its
// series to out. An error marks the collector failed for this scrape
// (berth_scrape_collector_success 0); what it sent still counts.
type Collector interface {
	Update(out Output, s Snapshot) error
}

// Output is where a collector sends one scrape's series: per-job samples
// into the scrape's job table (see jobFamily), any other series as a
// prometheus.Metric. Its methods are safe for concurrent use, provided
// that each job's samples come from one goroutine.
type Output struct {
	ch    chan<- prometheus.Metric
	table *jobTable
}

// Send sends a series that is not per job.
func (o Output) Send(m prometheus.Metric) { o.ch <- m }

// job sets the sample of f for the Snapshot's job i.
func (o Output) job(f *jobFamily, i int, v float64) { o.table.put(f, i, 0, v) }

// jobWith sets the sample of f whose extra label is extra for job i.
func (o Output) jobWith(f *jobFamily, i int, extra string, v float64) {
	o.table.put(f, i, f.value(extra), v)
}

var (
	descCollectDur = prometheus.NewDesc("berth_scrape_collector_duration_seconds", "How long a collector's read took during this scrape, seconds.", []string{"collector"}, nil)
	descCollectOK  = prometheus.NewDesc("berth_scrape_collector_success", "1 when every read of a collector succeeded during this scrape.", []string{"collector"}, nil)
)

// Exporter is a prometheus.Collector that takes one Snapshot per scrape and
// runs every named collector on it concurrently, timing each. Per-job
// samples land in its job table, which Registry.Handler writes after the
// rest: so one scrape at a time (Handler holds mu).
type Exporter struct {
	log        *slog.Logger
	lister     Lister
	names      []string
	collectors map[string]Collector
	mu         sync.Mutex // held by Registry.Handler for a whole scrape
	table      jobTable
}

// NewExporter returns an exporter over lister with the given collectors
// (name -> collector; the name is the `collector` label).
func NewExporter(log *slog.Logger, lister Lister, cs map[string]Collector) *Exporter {
	e := &Exporter{log: log, lister: lister, collectors: cs}
	for name := range cs {
		e.names = append(e.names, name)
	}
	return e
}

// Describe implements prometheus.Collector: the exporter is unchecked
// (its series depend on the jobs of the moment).
func (e *Exporter) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector; the caller holds e.mu (see
// Registry.Handler) and writes e.table afterwards.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	s := e.lister.Snapshot()
	e.table.reset(s.Jobs)
	out := Output{ch: ch, table: &e.table}
	var wg sync.WaitGroup
	for _, name := range e.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := e.collectors[name].Update(out, s)
			ch <- prometheus.MustNewConstMetric(descCollectDur, prometheus.GaugeValue, time.Since(start).Seconds(), name)
			ok := 1.0
			if err != nil {
				ok = 0
				e.log.Warn("collector failed", "collector", name, "error", err)
			}
			ch <- prometheus.MustNewConstMetric(descCollectOK, prometheus.GaugeValue, ok, name)
		}()
	}
	wg.Wait()
}

// Registry is what /metrics exposes: the exporter, the cluster collector's
// own metrics, and the Go runtime's and the agent process's standard
// go_* and process_* series.
type Registry struct {
	reg     *prometheus.Registry
	exp     *Exporter
	Cluster *ClusterMetrics
	log     *slog.Logger
}

// NewRegistry builds the registry of an agent: collectors agent, cgroup,
// group (sharing groups), procfs, pressure and cluster over lister's
// Snapshot, taken once per scrape. It returns an error when procfs cannot
// be opened.
func NewRegistry(log *slog.Logger, lister Lister) (*Registry, error) {
	proc, err := newProcfs(log)
	if err != nil {
		return nil, err
	}
	cm := newClusterMetrics()
	exp := NewExporter(log, lister, map[string]Collector{
		"agent":    agentCollector{},
		"cgroup":   newCgroup(log),
		"group":    newGroupCollector(log),
		"procfs":   proc,
		"pressure": newPressure(log),
		"cluster":  cm,
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), exp)
	return &Registry{reg: reg, exp: exp, Cluster: cm, log: log}, nil
}

// textFormat is the Content-Type of the text exposition format, version
// 0.0.4, which every Prometheus server reads.
const textFormat = "text/plain; version=0.0.4; charset=utf-8"

var (
	gzipWriters = sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
		return w
	}}
	bufWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}
)

// Handler serves the registry in the text exposition format (0.0.4),
// gzip-compressed (at gzip's fastest level) when the client accepts it: the
// Registry's families (go_*, process_*, the agent's own and the cluster's
// series), then every per-job family. A failed collector never fails the
// scrape: the error is logged and what was gathered is served. Scrapes
// run one at a time.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.exp.mu.Lock()
		defer r.exp.mu.Unlock()
		mfs, err := r.reg.Gather()
		if err != nil {
			r.log.Error("metrics exposition", "error", err)
		}
		h := w.Header()
		h.Set("Content-Type", textFormat)
		var out io.Writer = w
		if gzipAccepted(req) {
			h.Set("Content-Encoding", "gzip")
			h.Add("Vary", "Accept-Encoding")
			gz := gzipWriters.Get().(*gzip.Writer)
			gz.Reset(w)
			defer func() {
				_ = gz.Close()
				gz.Reset(nil)
				gzipWriters.Put(gz)
			}()
			out = gz
		}
		bw := bufWriters.Get().(*bufio.Writer)
		bw.Reset(out)
		defer func() {
			bw.Reset(nil)
			bufWriters.Put(bw)
		}()
		for _, mf := range mfs {
			if _, err := expfmt.MetricFamilyToText(bw, mf); err != nil {
				return // the client went away
			}
		}
		if err := r.exp.table.write(bw); err != nil {
			return
		}
		_ = bw.Flush()
	})
}

// gzipAccepted reports whether the request's Accept-Encoding names gzip
// (with a non-zero quality).
func gzipAccepted(req *http.Request) bool {
	for _, part := range strings.Split(req.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(coding) != "gzip" {
			continue
		}
		q := strings.ReplaceAll(params, " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
