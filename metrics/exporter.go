package metrics

import (
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Collector reads one source of numbers at scrape time and sends its
// series to ch. An error marks the collector failed for this scrape
// (berth_scrape_collector_success 0); what it sent still counts.
type Collector interface {
	Update(ch chan<- prometheus.Metric, s Snapshot) error
}

var (
	descCollectDur = prometheus.NewDesc("berth_scrape_collector_duration_seconds", "How long a collector's read took during this scrape, seconds.", []string{"collector"}, nil)
	descCollectOK  = prometheus.NewDesc("berth_scrape_collector_success", "1 when every read of a collector succeeded during this scrape.", []string{"collector"}, nil)
)

// Exporter is a prometheus.Collector that takes one Snapshot per scrape and
// runs every named collector on it concurrently, timing each.
type Exporter struct {
	log        *slog.Logger
	lister     Lister
	names      []string
	collectors map[string]Collector
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

// Collect implements prometheus.Collector.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	s := e.lister.Snapshot()
	var wg sync.WaitGroup
	for _, name := range e.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := e.collectors[name].Update(ch, s)
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
	Cluster *ClusterMetrics
	log     *slog.Logger
}

// NewRegistry builds the registry of an agent: collectors agent, cgroup,
// group (sharing groups), procfs, pressure and cluster (state read from cs)
// over lister. It returns an error when procfs cannot be opened.
func NewRegistry(log *slog.Logger, lister Lister, cs ClusterState) (*Registry, error) {
	proc, err := newProcfs(log)
	if err != nil {
		return nil, err
	}
	cm := newClusterMetrics(cs)
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
	return &Registry{reg: reg, Cluster: cm, log: log}, nil
}

// Gatherer returns the registry, for tests and lint.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves the registry in the Prometheus text (or OpenMetrics)
// exposition format; a failed collector never fails the scrape.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorLog: logAdapter{r.log}, ErrorHandling: promhttp.ContinueOnError})
}

// logAdapter lets promhttp log through slog.
type logAdapter struct{ log *slog.Logger }

func (l logAdapter) Println(v ...any) { l.log.Error("metrics exposition", "error", v) }
