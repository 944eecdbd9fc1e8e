package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ClusterState is what the cluster collector reads of the agent's
// membership at scrape time.
type ClusterState interface {
	// MemberUp reports whether the agent holds a live session.
	MemberUp() bool
	// Conflicts counts jobs declared by more than one member in the
	// published assignment.
	Conflicts() int
}

var (
	descMemberUp  = prometheus.NewDesc("berth_member_up", "1 while the agent holds a live session (is a cluster member), else 0.", nil, nil)
	descConflicts = prometheus.NewDesc("berth_static_conflicts", "Jobs declared by more than one member in the published assignment (KIP-987 static; lowest member ID wins).", nil, nil)
)

// ClusterMetrics is the cluster collector: membership and conflicts read
// at scrape time, plus lease renewal latencies and fencings, which the
// agent records as they happen.
type ClusterMetrics struct {
	state    ClusterState
	renew    prometheus.Histogram
	fencings prometheus.Counter
}

func newClusterMetrics(s ClusterState) *ClusterMetrics {
	return &ClusterMetrics{
		state: s,
		renew: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "berth_lease_renew_seconds",
			Help:    "Time one renewal of the agent's session lease took, seconds.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		fencings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berth_fencing_total",
			Help: "Times the agent lost its session and killed all its workers.",
		}),
	}
}

// ObserveRenew records one successful lease renewal's round trip.
func (m *ClusterMetrics) ObserveRenew(d time.Duration) { m.renew.Observe(d.Seconds()) }

// Fenced records one completed fencing.
func (m *ClusterMetrics) Fenced() { m.fencings.Inc() }

// Update implements Collector.
func (m *ClusterMetrics) Update(ch chan<- prometheus.Metric, _ Snapshot) error {
	m.renew.Collect(ch)
	m.fencings.Collect(ch)
	up := 0.0
	if m.state.MemberUp() {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descMemberUp, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(descConflicts, prometheus.GaugeValue, float64(m.state.Conflicts()))
	return nil
}
