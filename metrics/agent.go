package metrics

import (
	"github.com/berthd/berth/worker"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	famUp          = jobGauge("berth_job_up", "1 when the job's worker process is running, else 0.")
	famState       = newJobFamily("berth_job_state", "1 for the job's current state, 0 for every other state (one sample per state).", "gauge", "state", stateNames()...)
	famRestarts    = jobCounter("berth_job_restarts_total", "Times the job's worker was started again after it ended.")
	descJobs       = prometheus.NewDesc("berth_jobs", "Jobs run by this agent, by state.", []string{"state"}, nil)
	descGeneration = prometheus.NewDesc("berth_assignment_generation", "Generation of the assignment this agent runs.", nil, nil)
	descUnassigned = prometheus.NewDesc("berth_jobs_unassigned", "Jobs that exist but that no agent runs.", nil, nil)
	famPressure    = newJobFamily("berth_job_memory_pressure_actions_total", "Memory pressure actions the agent took for the job (memory_pressure): restart, a graceful stop before the OOM killer; notify, a pressure event the job was told of (its $MEMORY_PRESSURE_WATCH trigger).", "counter", "action", "notify", "restart")
	famBlocked     = jobGauge("berth_job_update_blocked", "1 while the job's new definition cannot start on this host (user, program or working directory missing) and the job keeps running its previous one, or while the kernel refuses one of its new limits in place (the others are applied), else 0.")
	descReloadOK   = prometheus.NewDesc("berth_config_last_reload_successful", "1 when the last reload of the configuration file succeeded (or none was tried since start), 0 when it was refused.", nil, nil)
	descReloadTime = prometheus.NewDesc("berth_config_last_reload_success_timestamp_seconds", "When the configuration file was last put in force (start or successful reload), seconds since the Unix epoch.", nil, nil)
)

// agentCollector reports what the agent knows of each job: its state,
// restarts and whether a new definition is held back; the assignment it
// runs; and how the last reload of its configuration file went. It reads
// no file.
type agentCollector struct{}

// stateNames are the values of berth_job_state's state label.
func stateNames() []string {
	var out []string
	for _, st := range worker.States() {
		out = append(out, string(st))
	}
	return out
}

// Update implements Collector.
func (agentCollector) Update(out Output, s Snapshot) error {
	states := worker.States()
	byState := map[worker.State]int{}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		byState[j.State]++
		up := 0.0
		if j.State == worker.Running {
			up = 1
		}
		out.job(famUp, i, up)
		for _, st := range states {
			v := 0.0
			if j.State == st {
				v = 1
			}
			out.jobWith(famState, i, string(st), v)
		}
		out.job(famRestarts, i, float64(j.Restarts))
		out.jobWith(famPressure, i, "notify", float64(j.PressureNotified))
		out.jobWith(famPressure, i, "restart", float64(j.PressureRestarts))
		blocked := 0.0
		if j.UpdateBlocked {
			blocked = 1
		}
		out.job(famBlocked, i, blocked)
	}
	for _, st := range states {
		out.Send(prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(byState[st]), string(st)))
	}
	out.Send(prometheus.MustNewConstMetric(descGeneration, prometheus.GaugeValue, float64(s.Generation)))
	out.Send(prometheus.MustNewConstMetric(descUnassigned, prometheus.GaugeValue, float64(s.Unassigned)))
	ok := 0.0
	if s.ReloadSuccessful {
		ok = 1
	}
	out.Send(prometheus.MustNewConstMetric(descReloadOK, prometheus.GaugeValue, ok))
	if !s.ReloadSuccessTime.IsZero() {
		out.Send(prometheus.MustNewConstMetric(descReloadTime, prometheus.GaugeValue, float64(s.ReloadSuccessTime.UnixNano())/1e9))
	}
	return nil
}
