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
	// Lease returns when the last successful renewal of the session's
	// lease was sent and the local fencing deadline it sets; both zero
	// while the agent holds no session (or has no store).
	Lease() (lastRenewal, deadline time.Time)
	// Fencings counts the times the agent lost its session and killed all
	// its workers since it started.
	Fencings() uint64
}

var (
	descMemberUp  = prometheus.NewDesc("berth_member_up", "1 while the agent holds a live session (is a cluster member), else 0.", nil, nil)
	descConflicts = prometheus.NewDesc("berth_static_conflicts", "Jobs declared by more than one member in the published assignment (KIP-987 static; lowest member ID wins).", nil, nil)
	descRenewal   = prometheus.NewDesc("berth_lease_last_renewal_timestamp_seconds", "When the last successful renewal of the session lease was sent, Unix seconds; the store cannot expire the lease before this + session_ttl. Absent without a session.", nil, nil)
	descFencings  = prometheus.NewDesc("berth_fencing_total", "Times the agent lost its session and killed all its workers.", nil, nil)
	descDeadline  = prometheus.NewDesc("berth_lease_deadline_timestamp_seconds", "The local fencing deadline, Unix seconds: last renewal + session_ttl - max(1 s, session_ttl/5); without a renewal by then every worker is killed. Absent without a session.", nil, nil)
)

// ClusterMetrics is the cluster collector: membership and conflicts read
// at scrape time (fencings too), plus lease renewal latencies, which the
// agent records as they happen.
type ClusterMetrics struct {
	state ClusterState
	renew prometheus.Histogram
}

func newClusterMetrics(s ClusterState) *ClusterMetrics {
	return &ClusterMetrics{
		state: s,
		renew: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "berth_lease_renew_seconds",
			Help:    "Time one renewal of the agent's session lease took, seconds.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
	}
}

// ObserveRenew records one successful lease renewal's round trip.
func (m *ClusterMetrics) ObserveRenew(d time.Duration) { m.renew.Observe(d.Seconds()) }

// Update implements Collector.
func (m *ClusterMetrics) Update(out Output, _ Snapshot) error {
	m.renew.Collect(out.ch)
	out.Send(prometheus.MustNewConstMetric(descFencings, prometheus.CounterValue, float64(m.state.Fencings())))
	up := 0.0
	if m.state.MemberUp() {
		up = 1
	}
	out.Send(prometheus.MustNewConstMetric(descMemberUp, prometheus.GaugeValue, up))
	out.Send(prometheus.MustNewConstMetric(descConflicts, prometheus.GaugeValue, float64(m.state.Conflicts())))
	if last, deadline := m.state.Lease(); !last.IsZero() {
		out.Send(prometheus.MustNewConstMetric(descRenewal, prometheus.GaugeValue, unixSeconds(last)))
		out.Send(prometheus.MustNewConstMetric(descDeadline, prometheus.GaugeValue, unixSeconds(deadline)))
	}
	return nil
}

// unixSeconds is t as Unix seconds with nanosecond fraction.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
