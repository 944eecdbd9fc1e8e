package metrics

import (
	"github.com/berthd/berth/worker"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	descUp         = jobDesc("berth_job_up", "1 when the job's worker process is running, else 0.")
	descState      = jobDesc("berth_job_state", "1 for the job's current state (waiting, starting, running, backoff, exited, failed, stopping, stopped).", "state")
	descRestarts   = jobDesc("berth_job_restarts_total", "Times the job's worker was started again after it ended.")
	descJobs       = prometheus.NewDesc("berth_jobs", "Jobs run by this agent, by state.", []string{"state"}, nil)
	descGeneration = prometheus.NewDesc("berth_assignment_generation", "Generation of the assignment this agent runs.", nil, nil)
	descUnassigned = prometheus.NewDesc("berth_jobs_unassigned", "Jobs that exist but that no agent runs.", nil, nil)
)

// agentCollector reports what the agent knows of each job: its state and
// restarts, and the assignment it runs. It reads no file.
type agentCollector struct{}

// Update implements Collector.
func (agentCollector) Update(ch chan<- prometheus.Metric, s Snapshot) error {
	states := worker.States()
	byState := map[worker.State]int{}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		l := j.labels()
		byState[j.State]++
		up := 0.0
		if j.State == worker.Running {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, l...)
		for _, st := range states {
			v := 0.0
			if j.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, with(l, string(st))...)
		}
		ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(j.Restarts), l...)
	}
	for _, st := range states {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(byState[st]), string(st))
	}
	ch <- prometheus.MustNewConstMetric(descGeneration, prometheus.GaugeValue, float64(s.Generation))
	ch <- prometheus.MustNewConstMetric(descUnassigned, prometheus.GaugeValue, float64(s.Unassigned))
	return nil
}
