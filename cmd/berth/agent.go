package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

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

	// systemd's watchdog (WatchdogSec=) is fed at half its interval, and
	// only while the agent's loop is healthy; STATUS= is refreshed with it.
	var watchdog <-chan time.Time
	if interval, err := daemon.SdWatchdogEnabled(false); err == nil && interval > 0 {
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		watchdog = t.C
	}
	status := time.NewTicker(10 * time.Second)
	defer status.Stop()
	ready := agent.Ready()
	reloaded := make(chan struct{}, 1)
	reloading, reloadAgain := false, false
	for {
		select {
		case <-ready:
			ready = nil // once
			_, _ = daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS="+agent.Summary())
			log.Info("agent ready", "status", agent.Summary())
		case <-watchdog:
			if agent.Healthy() {
				_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
			} else {
				log.Error("agent loop stuck; not feeding the watchdog")
			}
		case <-status.C:
			_, _ = daemon.SdNotify(false, "STATUS="+agent.Summary())
		case sig := <-sigs:
			switch sig {
			case syscall.SIGHUP:
				// Reload off this loop, so that SIGTERM and the watchdog are
				// served meanwhile; a SIGHUP during a reload runs another
				// one after it.
				if reloading {
					reloadAgain = true
					break
				}
				reloading = true
				_, _ = daemon.SdNotify(false, daemon.SdNotifyReloading)
				go func() {
					// A refused reload is logged by the agent and changes nothing.
					_ = agent.Reload(ctx)
					reloaded <- struct{}{}
				}()
			default:
				log.Info("stopping", "signal", sig.String())
				_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping)
				cancel()
			}
		case <-reloaded:
			if reloadAgain {
				reloadAgain = false
				go func() {
					_ = agent.Reload(ctx)
					reloaded <- struct{}{}
				}()
				break
			}
			reloading = false
			_, _ = daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS="+agent.Summary())
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
