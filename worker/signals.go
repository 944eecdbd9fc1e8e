package worker

import (
	"os"
	"os/signal"
	"syscall"
)

// stopSignals are the signals a job may be stopped with (kill_signal, and
// SIGKILL, which cannot be ignored) that a process can inherit ignored.
var stopSignals = []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// unignoreStopSignals makes every stop signal the agent was started with
// ignored reach its jobs with the default action. A signal ignored at
// start (a shell starts its background jobs with SIGINT and SIGQUIT
// ignored, nohup ignores SIGHUP) stays ignored across execve(2) in every
// job, and a job's shell cannot even trap it (POSIX: signals ignored on
// entry to a non-interactive shell), so kill_signal = "SIGINT" would never
// reach it. A signal that is caught is reset to its default by execve(2):
// the agent catches each such signal on a channel nobody reads, so that
// the agent itself still ignores it (signal.Notify drops what a full
// channel cannot take), for the process's whole life, as systemd's
// services start with every signal at its default. The agent's own entry
// point catches SIGINT, SIGTERM and SIGHUP anyway (and Go's runtime
// catches the others unless SIGHUP or SIGINT was ignored at start); this
// covers any other process that runs workers, a test binary started in a
// shell's background among them.
func unignoreStopSignals() {
	var ignored []os.Signal
	for _, s := range stopSignals {
		if signal.Ignored(s) {
			ignored = append(ignored, s)
		}
	}
	if len(ignored) > 0 {
		signal.Notify(make(chan os.Signal, 1), ignored...)
	}
}
