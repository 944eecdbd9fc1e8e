package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/berthd/berth/daemon"
	"github.com/berthd/berth/scope"
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
// install must not replace a working agent), or the renewal fails; this
// agent then goes on as before. execve(2) failing is also returned, with
// this agent intact.
func handOver(log *slog.Logger, agent *daemon.Agent, self string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, self, "version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("hand-over refused: %s does not run (%v): %s", self, err, strings.TrimSpace(string(out)))
	}
	newVersion := strings.TrimSpace(string(out))
	// The last thing before the exec: a fresh renewal, its deadline held
	// by the lease guard, gives the new program the whole TTL.
	if err := agent.PrepareHandOver(ctx); err != nil {
		return fmt.Errorf("hand-over refused: %w", err)
	}
	log.Info("handing the jobs over to the program installed at this agent's path; the jobs keep running",
		"program", self, "from_version", version, "to", newVersion, "pid", os.Getpid())
	_, _ = sd.SdNotify(false, sd.SdNotifyReloading+"\nSTATUS=handing the jobs over to "+newVersion)
	env := append(withoutEnv(os.Environ(), handOverEnv), handOverEnv+"="+version)
	err = unix.Exec(self, append([]string{self}, os.Args[1:]...), env)
	_, _ = sd.SdNotify(false, sd.SdNotifyReady)
	return fmt.Errorf("hand-over failed: execve %s: %w", self, err)
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
