package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descMemberUp  = prometheus.NewDesc("berth_member_up", "1 while the agent holds a live session (is a cluster member), else 0.", nil, nil)
	descConflicts = prometheus.NewDesc("berth_static_conflicts", "Jobs declared by more than one member in the published assignment (KIP-987 static; lowest member ID wins).", nil, nil)
	descRenewal   = prometheus.NewDesc("berth_lease_last_renewal_timestamp_seconds", "When the last successful renewal of the session lease was sent, Unix seconds; the store cannot expire the lease before this + session_ttl. Absent without a session.", nil, nil)
	descFencings  = prometheus.NewDesc("berth_fencing_total", "Times the agent lost its session and killed all its workers.", nil, nil)
	descDeadline  = prometheus.NewDesc("berth_lease_deadline_timestamp_seconds", "The local fencing deadline, Unix seconds: last renewal + session_ttl - max(1 s, session_ttl/5); without a renewal by then every worker is killed. Absent without a session.", nil, nil)
)

// ClusterMetrics is the cluster collector: the scrape's Snapshot's
// Membership (session, conflicts, fencings), plus lease renewal latencies,
// which the agent records as they happen.
type ClusterMetrics struct {
	renew prometheus.Histogram
}

func newClusterMetrics() *ClusterMetrics {
	return &ClusterMetrics{
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
func (m *ClusterMetrics) Update(out Output, s Snapshot) error {
	c := s.Membership
	m.renew.Collect(out.ch)
	out.Send(prometheus.MustNewConstMetric(descFencings, prometheus.CounterValue, float64(c.Fencings)))
	up := 0.0
	if c.Up {
		up = 1
	}
	out.Send(prometheus.MustNewConstMetric(descMemberUp, prometheus.GaugeValue, up))
	out.Send(prometheus.MustNewConstMetric(descConflicts, prometheus.GaugeValue, float64(c.Conflicts)))
	if !c.LastRenewal.IsZero() {
		out.Send(prometheus.MustNewConstMetric(descRenewal, prometheus.GaugeValue, unixSeconds(c.LastRenewal)))
		out.Send(prometheus.MustNewConstMetric(descDeadline, prometheus.GaugeValue, unixSeconds(c.Deadline)))
	}
	return nil
}

// unixSeconds is t as Unix seconds with nanosecond fraction.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
