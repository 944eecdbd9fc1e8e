package worker

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// State is where a worker is in its lifetime; its value is the string used
// in JSON and metrics.
type State string

// The states of a worker.
const (
	// Starting: the process is being forked and placed in its cgroup.
	Starting State = "starting"
	// Running: the main process has exec'd the job and not yet exited.
	Running State = "running"
	// BackingOff: the process exited and the restart policy restarts it after
	// Status.NextRestart; or its start failed for a reason that passes
	// (TransientStart, Status.Reason says which) and it is started again
	// then.
	BackingOff State = "backoff"
	// Exited: the process exited and the restart policy does not restart it.
	Exited State = "exited"
	// Failed: the job cannot be started (Status.Reason says why); it is not
	// retried until its definition changes or a reload asks.
	Failed State = "failed"
	// Stopping: Stop was called; SIGTERM sent, waiting for the cgroup to empty.
	Stopping State = "stopping"
	// Stopped: Stop finished; no process of the job is left.
	Stopped State = "stopped"
)

// Exit is how one run of a job's main process ended.
type Exit struct {
	// Time the agent reaped the process.
	Time time.Time `json:"time"`
	// Code is the exit status (0–255), or -1 when a signal ended the process.
	Code int `json:"code"`
	// Signal is the name of the signal that ended the process ("SIGKILL"),
	// "" when it exited.
	Signal string `json:"signal,omitempty"`
	// OOMKilled is true when the process died of SIGKILL and the cgroup's
	// OOM kill count grew during the run (memory.oom_control oom_kill on v1,
	// memory.events oom_kill on v2).
	OOMKilled bool `json:"oom_killed"`
	// MemoryPressure says, with the figures that triggered it, that the
	// agent stopped the run because its memory was under pressure
	// (memory_pressure = "restart", Worker.PressureStop): "usage 41943040
	// bytes crossed memory_high 41943040 bytes (cgroup v1 threshold)", or
	// "memory stall (PSI some) at least 10% for 1.98s (avg10 35.20%, total
	// 1.234s)"; "" when it was not.
	MemoryPressure string `json:"memory_pressure,omitempty"`
	// Reason is the human summary: "exited 1", "killed by SIGKILL (OOM
	// kill)", "killed by SIGTERM (memory pressure: ...)".
	Reason string `json:"reason"`
}

// Status is a snapshot of a worker, safe to read from any goroutine.
type Status struct {
	State State `json:"state"`
	// PID of the job's main process while Starting, Running or Stopping; 0
	// otherwise.
	PID int `json:"pid,omitempty"`
	// StartedAt is when the current or last run began (zero before the first).
	StartedAt time.Time `json:"started_at,omitzero"`
	// Restarts counts runs started by the restart policy (not the first).
	Restarts int `json:"restarts"`
	// LastExit is how the last run ended; nil before the first exit.
	LastExit *Exit `json:"last_exit,omitempty"`
	// Reason says why the worker is Failed (a start error) or backs off
	// after a start that failed for a reason that passes; empty otherwise.
	Reason string `json:"reason,omitempty"`
	// NextRestart is when a worker in BackingOff starts again (LastExit.Time,
	// or the failed start's time, plus the backoff delay); zero otherwise.
	NextRestart time.Time `json:"next_restart,omitzero"`
	// Token is the fencing token of the current or last run
	// (BERTH_FENCING_TOKEN, Spec.Token); 0: none (no run yet, a worker
	// without tokens, or a run an earlier release started).
	Token uint64 `json:"fencing_token,omitempty"`
}

// exitFromStatus turns a wait4(2) status into an Exit.
func exitFromStatus(ws unix.WaitStatus, at time.Time, oomKilled bool) Exit {
	e := Exit{Time: at, Code: -1}
	switch {
	case ws.Exited():
		e.Code = ws.ExitStatus()
		e.Reason = fmt.Sprintf("exited %d", e.Code)
	case ws.Signaled():
		e.Signal = unix.SignalName(ws.Signal())
		if e.Signal == "" {
			e.Signal = fmt.Sprintf("signal %d", int(ws.Signal()))
		}
		e.OOMKilled = oomKilled && ws.Signal() == unix.SIGKILL
		e.Reason = "killed by " + e.Signal
		if e.OOMKilled {
			e.Reason += " (OOM kill)"
		}
	default:
		e.Reason = fmt.Sprintf("wait status %#x", uint32(ws))
	}
	return e
}

// failed reports whether e counts as a failure for the on-failure policy (spec.RestartOnFailure): a
// non-zero exit status or death by a signal, or a stop for memory pressure
// (the job did not choose to end, whatever status its stop handler
// returned).
func (e Exit) failed() bool { return e.Code != 0 || e.MemoryPressure != "" }
