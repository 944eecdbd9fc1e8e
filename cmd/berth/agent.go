package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/daemon"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/worker"
	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
)

func agentCmd(configPath *string) *cobra.Command {
	var pprofAddr, guardPprof string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the host agent",
		Long: `Run the host agent until SIGTERM or SIGINT; SIGHUP reloads the file
(` + "`berth reload`" + ` sends it and prints the result); SIGUSR2 hands every
job over to the program installed at the agent's path, without a restart
(` + "`berth upgrade`" + ` sends it and waits for the hand-over).

The agent kills whatever an earlier run left in its cgroup root, joins its
cluster (an embedded etcd when [cluster] names no endpoints), and runs the
jobs the assignment gives it. Under systemd (Type=notify) it reports READY=1
after its first reconcile, RELOADING=1 around a reload and feeds the watchdog
while its loop is healthy.

Exit status: 0 after a clean stop (every worker gone, every cgroup removed),
1 when the agent failed, 2 when the file does not validate.`,
		Example: `  berth agent --config /etc/berth/berth.toml
  berth agent -c packaging/examples/berth.toml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pprofAddr != "" {
				stop, err := servePprof(pprofAddr)
				if err != nil {
					return err
				}
				defer stop()
			}
			return runAgent(*configPath, guardPprof)
		},
	}
	cmd.Flags().StringVar(&pprofAddr, "pprof", "", "serve Go's net/http/pprof profiles on this address (host:port), for profiling; off by default")
	_ = cmd.Flags().MarkHidden("pprof")
	cmd.Flags().StringVar(&guardPprof, "guard-pprof", "", "have the lease guard this agent starts serve Go's net/http/pprof profiles on this address (berth guard --pprof), for profiling; off by default")
	_ = cmd.Flags().MarkHidden("guard-pprof")
	return cmd
}

// runAgent runs the agent until SIGTERM or SIGINT, reloading on SIGHUP.
// guardPprof, when set, is passed to the lease guard as --pprof.
func runAgent(path, guardPprof string) error {
	tuneGC()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(log)

	// Before anything is spawned: no descriptor the agent inherited (a
	// wrapper's `exec 7>>FILE`, flock(1)'s lock) may reach a job.
	inherited, err := worker.SealInheritedDescriptors()
	if err != nil {
		return err
	}
	for _, d := range inherited {
		log.Info("inherited descriptor kept from jobs (marked close-on-exec)", "fd", d.FD, "target", d.Target)
	}

	// Caught before the file is read: a SIGHUP from here on is a reload
	// after the start (queued until the agent is ready), and one that
	// came before was ignored (a hand-over's exec window: handOver) and
	// is covered by this read.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	host := agentHost()
	cfg, err := config.Load(path, host)
	if err != nil {
		return configError(err)
	}
	if os.Geteuid() != 0 {
		log.Warn("not running as root: making cgroups will likely fail")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program to run its lease guard: %w", err)
	}
	from := handedOverFrom()
	agent := daemon.New(cfg, path, daemon.Options{Logger: log, Host: host, Version: version, Commit: commit,
		GuardCommand: guardCommand(self, guardPprof), HandedOver: from != ""})
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	if from != "" {
		log.Info("agent starting", "version", version, "commit", commit, "config", path, "id", cfg.Agent.ID, "handed_over_from", from)
	} else {
		log.Info("agent starting", "version", version, "commit", commit, "config", path, "id", cfg.Agent.ID)
	}

	// systemd's watchdog (WatchdogSec=) is fed at half its interval, and
	// only while the agent's loop is healthy; STATUS= is refreshed with it.
	var watchdog <-chan time.Time
	if interval, err := sd.SdWatchdogEnabled(false); err == nil && interval > 0 {
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		watchdog = t.C
	}
	status := time.NewTicker(10 * time.Second)
	defer status.Stop()
	ready := agent.Ready()
	// Reloads run off this loop, so that SIGTERM and the watchdog are
	// served meanwhile; a SIGHUP during a reload runs another one after it.
	reloaded := make(chan struct{}, 1)
	reloading, reloadAgain := false, false
	// A SIGHUP or SIGUSR2 before the agent is ready (the first moments of
	// a new image, a hand-over's among them), and a SIGUSR2 during a
	// reload, are queued: run once the agent is ready, or the reload done.
	started, upgradeNext := false, false
	upgrade := func() {
		upgradeNext = false
		if err := handOver(log, agent, self, path, sigs); err != nil {
			log.Error("the agent goes on as before", "error", err)
			agent.HandOverRefused(err)
		}
	}
	startReload := func() {
		reloading = true
		_, _ = sd.SdNotify(false, sd.SdNotifyReloading)
		go func() {
			_ = agent.Reload(ctx) // a refused reload is logged and changes nothing
			reloaded <- struct{}{}
		}()
	}
	for {
		select {
		case <-ready:
			ready, started = nil, true // once
			status := agent.Summary()
			_, _ = sd.SdNotify(false, sd.SdNotifyReady+"\nSTATUS="+status)
			log.Info("agent ready", "status", status)
			if reloadAgain {
				reloadAgain = false
				startReload()
			} else if upgradeNext {
				upgrade()
			}
		case <-watchdog:
			if agent.Healthy() {
				_, _ = sd.SdNotify(false, sd.SdNotifyWatchdog)
			} else {
				log.Error("agent loop stuck; not feeding the watchdog")
			}
		case <-status.C:
			_, _ = sd.SdNotify(false, "STATUS="+agent.Summary())
		case sig := <-sigs:
			if sig == syscall.SIGUSR2 {
				if !started || reloading {
					if !upgradeNext { // one line however many come
						log.Info("hand-over queued until the agent is ready and no reload is under way", "ready", started, "reloading", reloading)
					}
					upgradeNext = true
					break
				}
				upgrade()
				break
			}
			if sig != syscall.SIGHUP {
				if sig == syscall.SIGTERM {
					handOverForRestart(log, agent) // exits when systemd restarts the service
				}
				log.Info("stopping", "signal", sig.String())
				_, _ = sd.SdNotify(false, sd.SdNotifyStopping)
				cancel()
				break
			}
			if reloading || !started {
				reloadAgain = true
				break
			}
			startReload()
		case <-reloaded:
			reloading = false
			if reloadAgain {
				reloadAgain = false
				startReload()
				break
			}
			_, _ = sd.SdNotify(false, sd.SdNotifyReady+"\nSTATUS="+agent.Summary())
			if upgradeNext {
				upgrade()
			}
		case err := <-done:
			if reloading {
				<-reloaded // the reload goroutine ends with the agent's loop
			}
			if err != nil {
				log.Error("agent failed", "error", err)
				return &exitError{code: 1, err: fmt.Errorf("agent failed: %w", err)}
			}
			log.Info("agent stopped")
			return nil
		}
	}
}

// agentHost is host.Local with the web configuration check of the
// agent's listener (api.CheckWebConfig): what the agent checks its file
// against at start and on every reload, and what berth validate checks.
func agentHost() *host.Host {
	h := host.Local()
	h.CheckWebConfig = func(path string) error {
		_, err := api.CheckWebConfig(path)
		return err
	}
	return h
}

// guardCommand runs the lease guard: `berth guard`, with --pprof addr when
// pprofAddr is set.
func guardCommand(self, pprofAddr string) []string {
	if pprofAddr != "" {
		return []string{self, "guard", "--pprof", pprofAddr}
	}
	return []string{self, "guard"}
}
