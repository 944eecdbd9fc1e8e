package worker

import (
	"log/slog"
	"time"
)

// LogTransitions returns an OnChange (Spec) that logs a worker's state
// changes in the agent's log, one line per event, so that `journalctl -u berth` tells what happened to
// every job without reading its output.
//
// While fencing reports true (the agent fences), an exit is fencing's kill, not the job's doing:
// it is logged as such (at INFO, after the fencing line that says why),
// never as a crash to restart. The worker reports it as Exited or
// BackingOff when its exit step runs before the Stop that fencing sends,
// and as Stopping then Stopped (with the exit) when the Stop's step runs
// first; either order gives one line.
func LogTransitions(log *slog.Logger, id string, fencing func() bool) func(Status) {
	var prev State // the worker calls OnChange one call at a time
	return func(st Status) {
		was := prev
		prev = st.State
		if fencing() && st.LastExit != nil && st.Reason == "" && (st.State == Exited || st.State == BackingOff ||
			st.State == Stopped && was == Stopping) {
			log.Info("job killed by fencing", "job_id", id, "exit", st.LastExit.Reason)
			return
		}
		switch st.State {
		case Running:
			log.Info("job running", "job_id", id, "pid", st.PID, "restarts", st.Restarts, "fencing_token", st.Token)
		case Failed:
			log.Error("job failed to start; it is retried on reload or when its definition changes", "job_id", id, "reason", st.Reason)
		case Exited:
			if st.LastExit.Code == 0 {
				log.Info("job exited cleanly; its restart policy does not restart it", "job_id", id, "exit", st.LastExit.Reason)
			} else {
				log.Error("job failed: it exited and its restart policy does not restart it", "job_id", id, "exit", st.LastExit.Reason,
					"oom_killed", st.LastExit.OOMKilled)
			}
		case BackingOff:
			if st.LastExit == nil || st.Reason != "" {
				log.Warn("job failed to start for a reason that passes; trying again", "job_id", id, "reason", st.Reason,
					"restart_at", st.NextRestart.Format(time.RFC3339Nano))
				return
			}
			log.Warn("job exited; restarting", "job_id", id, "exit", st.LastExit.Reason,
				"oom_killed", st.LastExit.OOMKilled, "restart_at", st.NextRestart.Format(time.RFC3339Nano))
		}
	}
}
