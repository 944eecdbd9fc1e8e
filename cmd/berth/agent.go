package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/supervisor"
	"github.com/coreos/go-systemd/v22/daemon"
)

// runAgent runs the agent until SIGTERM or SIGINT, reloading on SIGHUP.
// Exit codes: 0 after a clean stop (every worker gone, every cgroup
// removed), 1 when the agent failed, 2 for a bad command line or a
// configuration that does not validate.
func runAgent(args []string) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	config := fs.String("config", defaultConfig, "configuration file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(log)

	cfg, err := limits.Load(*config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if os.Geteuid() != 0 {
		log.Warn("not running as root: making cgroups will likely fail")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	agent := supervisor.New(cfg, *config, supervisor.Options{Logger: log})
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	log.Info("agent starting", "version", version, "commit", commit, "config", *config, "id", cfg.Agent.ID)

	ready := agent.Ready()
	for {
		select {
		case <-ready:
			ready = nil // once
			_, _ = daemon.SdNotify(false, daemon.SdNotifyReady)
			log.Info("agent ready")
		case sig := <-sigs:
			switch sig {
			case syscall.SIGHUP:
				_, _ = daemon.SdNotify(false, daemon.SdNotifyReloading)
				if err := agent.Reload(ctx); err != nil {
					log.Error("reload failed", "error", err)
				}
				_, _ = daemon.SdNotify(false, daemon.SdNotifyReady)
			default:
				log.Info("stopping", "signal", sig.String())
				_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
				cancel()
			}
		case err := <-done:
			if err != nil {
				log.Error("agent failed", "error", err)
				return 1
			}
			log.Info("agent stopped")
			return 0
		}
	}
}
