package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/berthd/berth/daemon"
	"github.com/berthd/berth/scope"
	"github.com/berthd/berth/worker"
	sd "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// handOverEnv is set in the environment of an agent started by a hand-over
// (SIGUSR2): the version of the agent that handed its jobs over. The new
// agent logs it and removes it.
const handOverEnv = "BERTH_HANDED_OVER_FROM"

// handOver replaces this agent's image with the program at self (the
// binary now installed at the path this one was started from: after a
// package upgrade, the new release), keeping the pid, so that a service
// manager's MainPID holds and nothing is stopped. The jobs keep running:
// the lease guard is their parent and holds their runs; the new image
// resumes the session (the lease was not revoked) and adopts every run
// (docs/live-restart.md, "Upgrade by re-exec").
//
// Just before the exec it renews the session's lease and waits for the
// lease guard to hold the new deadline (daemon.Agent.PrepareHandOver),
// so that the new program has the whole session TTL to resume.
//
// It refuses, logging why, and returns the error, when the program at
// self does not run (`self version` must exit 0 within 10 s: a broken
// install must not replace a working agent), when it refuses the
// configuration file (`self validate --config path` must exit 0: an
// older release without a key the file uses would exit at its start,
// leaving the jobs to the guard's kill), or the renewal fails; this agent
// then goes on as before. execve(2) failing is also returned, with this
// agent intact.
//
// Signals in the exec's window: from just before the exec until the new
// image's signal.Notify, SIGHUP and SIGUSR2 are ignored (SIG_IGN, which
// execve keeps), not left at their default action, which would end the
// agent (exit 129) with its jobs left to the guard's kill. Go's runtime
// keeps an inherited SIG_IGN of SIGHUP until Notify, and drops a SIGUSR2
// nobody asked for. So such a signal is never fatal: one caught by the
// new image's Notify is queued until it is ready (runAgent); one that
// came in the window is applied anyway, a reload because the new image
// reads the file after its Notify, an upgrade because the new image is
// the program installed at self. sigs is runAgent's channel: what it
// holds at the exec would be lost with the old image, so a stop signal
// found there refuses the hand-over and is put back; on a failed exec
// SIGHUP and SIGUSR2 are caught again on it.
func handOver(log *slog.Logger, agent *daemon.Agent, self, configPath string, sigs chan os.Signal) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Through the reaper: this process's wait4(-1) would take the exit
	// status os/exec waits for (worker.Output).
	out, err := worker.Output(ctx, []string{self, "version"})
	if err != nil {
		return fmt.Errorf("hand-over refused: %s does not run (%v): %s", self, err, strings.TrimSpace(string(out)))
	}
	newVersion := strings.TrimSpace(string(out))
	// The new program starts with the file at configPath: it must take it.
	out, err = worker.Output(ctx, []string{self, "validate", "--config", configPath})
	if err != nil {
		return fmt.Errorf("hand-over refused: %s (%s) refuses the configuration file (%v): %s", self, newVersion, err, validateProblems(out))
	}
	// The last thing before the exec: a fresh renewal, its deadline held
	// by the lease guard, gives the new program the whole TTL.
	if err := agent.PrepareHandOver(ctx); err != nil {
		return fmt.Errorf("hand-over refused: %w", err)
	}
	signal.Ignore(syscall.SIGHUP, syscall.SIGUSR2)
	restore := func() { signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR2) }
	if stop, ok := stopSignal(sigs); ok {
		restore()
		select {
		case sigs <- stop:
		default:
		}
		return fmt.Errorf("hand-over refused: %s came while it was prepared; stopping instead", stop)
	}
	log.Info("handing the jobs over to the program installed at this agent's path; the jobs keep running",
		"program", self, "from_version", version, "to", newVersion, "pid", os.Getpid())
	_, _ = sd.SdNotify(false, sd.SdNotifyReloading+"\nSTATUS=handing the jobs over to "+newVersion)
	env := append(withoutEnv(os.Environ(), handOverEnv), handOverEnv+"="+version)
	err = unix.Exec(self, append([]string{self}, os.Args[1:]...), env)
	restore()
	_, _ = sd.SdNotify(false, sd.SdNotifyReady)
	return fmt.Errorf("hand-over failed: execve %s: %w", self, err)
}

// stopSignal takes what sigs holds and returns the first SIGTERM or
// SIGINT among it; the rest (SIGHUP, SIGUSR2) is dropped: the new image
// reads the file anyway, and is the upgrade.
func stopSignal(sigs chan os.Signal) (os.Signal, bool) {
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGTERM || s == syscall.SIGINT {
				return s, true
			}
		default:
			return nil, false
		}
	}
}

// validateProblems is what `berth validate` printed, on one line, at most
// its first 10 lines.
func validateProblems(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 10 {
		lines = append(lines[:10], fmt.Sprintf("(%d more lines)", len(lines)-10))
	}
	return strings.Join(lines, "; ")
}

// withoutEnv returns env without the variable name.
func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// handedOverFrom returns the version of the agent that handed its jobs
// over to this one ("" when none did) and removes the variable from this
// process's environment, so that nothing it starts inherits it.
func handedOverFrom() string {
	v, ok := os.LookupEnv(handOverEnv)
	if ok {
		_ = os.Unsetenv(handOverEnv)
	}
	return v
}

// restartTimeout bounds the check that systemd is restarting the service
// and the renewal before the agent exits for it.
const restartTimeout = 5 * time.Second

// handOverForRestart is what SIGTERM does when systemd restarts the
// agent's service (systemctl restart) and the jobs live in a scope of
// their own (package scope): instead of stopping every job it renews the
// session's lease, has the lease guard hold that deadline, and exits at
// once with status 0, leaving the jobs running in their scope; the agent
// systemd starts next adopts them (docs/live-restart.md). It returns only
// when it does not hand over: the signal was not a restart of the
// service, the jobs share the service's cgroup (systemd's kill of it
// would end them), systemd could not be asked, or the hand-over was
// refused (logged); the caller then stops every job as for a stop.
func handOverForRestart(log *slog.Logger, agent *daemon.Agent) {
	unit, jobsScope := agent.Service()
	if jobsScope == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
	defer cancel()
	restarting, err := scope.Restarting(ctx, unit)
	if err != nil {
		log.Warn("cannot tell a restart of the service from a stop: stopping every job", "service", unit, "error", err)
		return
	}
	if !restarting {
		return
	}
	if err := agent.PrepareHandOver(ctx); err != nil {
		log.Error("systemd restarts the service, but the jobs cannot be handed over: stopping every job", "service", unit, "error", err)
		return
	}
	log.Info("systemd restarts the service: the jobs keep running in their scope for the next agent", "service", unit, "scope", jobsScope, "pid", os.Getpid())
	_, _ = sd.SdNotify(false, sd.SdNotifyStopping)
	// No deferred clean-up may run: it would stop the jobs. The kernel
	// closes the guard connection, the listener and the locks.
	os.Exit(0)
}
