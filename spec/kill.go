package spec

import (
	"strings"
	"syscall"
)

// KillMode is which processes of a job a stop signals, named as systemd's
// KillMode= values (systemd.kill(5)). Whatever the mode, a stop ends with
// no process of the job left: once the grace (stop_timeout) is over, or
// once the main process has exited in mode mixed, every process still in
// the job's cgroup is killed with SIGKILL, and the cgroup is removed.
type KillMode string

// Kill modes.
const (
	// KillControlGroup sends the stop signal to every process of the
	// job's cgroup, waits until the cgroup is empty or the grace is over,
	// then SIGKILLs what is left (systemd KillMode=control-group). The
	// default.
	KillControlGroup KillMode = "control-group"
	// KillMixed sends the stop signal to the main process only; once it
	// has exited, or the grace is over, every process left in the cgroup
	// gets SIGKILL (systemd KillMode=mixed).
	KillMixed KillMode = "mixed"
	// KillProcess sends the stop signal to the main process only, and
	// leaves the others alone until the cgroup is empty or the grace is
	// over; then what is left gets SIGKILL (systemd KillMode=process,
	// except that systemd leaves the others running for good).
	KillProcess KillMode = "process"
)

// Signal is a stop signal (kill_signal) by its canonical name, "SIGTERM";
// "" means the default (DefaultKillSignal, or what [agent] kill_signal
// says for a process).
type Signal string

// stopSignals are the signals kill_signal accepts (signal(7)), in the
// order docs/config.md lists them: those that ask a program to stop or
// that programs commonly take as their stop request (nginx: SIGQUIT,
// httpd: SIGWINCH), and SIGKILL for no grace at all.
var stopSignals = []struct {
	name Signal
	num  syscall.Signal
}{
	{"SIGTERM", syscall.SIGTERM}, {"SIGINT", syscall.SIGINT}, {"SIGQUIT", syscall.SIGQUIT},
	{"SIGHUP", syscall.SIGHUP}, {"SIGUSR1", syscall.SIGUSR1}, {"SIGUSR2", syscall.SIGUSR2},
	{"SIGWINCH", syscall.SIGWINCH}, {"SIGKILL", syscall.SIGKILL},
}

// StopSignalNames lists the canonical names of the signals kill_signal
// accepts: "SIGTERM", "SIGINT", ...
func StopSignalNames() []string {
	out := make([]string, len(stopSignals))
	for i, s := range stopSignals {
		out[i] = string(s.name)
	}
	return out
}

// ParseSignal reads a kill_signal value: a name of StopSignalNames, with or
// without its "SIG" prefix ("SIGTERM", "TERM", as systemd's KillSignal=
// takes them). ok is false for anything else.
func ParseSignal(s string) (sig Signal, ok bool) {
	name := s
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	for _, x := range stopSignals {
		if string(x.name) == name {
			return x.name, true
		}
	}
	return "", false
}

// Number is the signal's number; "" and an unknown name give SIGTERM.
func (s Signal) Number() syscall.Signal {
	for _, x := range stopSignals {
		if x.name == s {
			return x.num
		}
	}
	return syscall.SIGTERM
}

// Defaults of a process's stop (systemd.kill(5)).
const (
	// DefaultKillMode is kill_mode when neither the process nor [agent]
	// sets one.
	DefaultKillMode = KillControlGroup
	// DefaultKillSignal is kill_signal when neither the process nor
	// [agent] sets one.
	DefaultKillSignal Signal = "SIGTERM"
)
