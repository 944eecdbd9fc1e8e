package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/berthd/berth/guard"
	"github.com/berthd/berth/worker"
	"github.com/spf13/cobra"
)

// guardCmd is `berth guard`, hidden: the agent starts it (guard.Start),
// an operator never needs to.
func guardCmd() *cobra.Command {
	var dataDir, cgroupRoot, pprofAddr string
	cmd := &cobra.Command{
		Use:    "guard",
		Short:  "kill every job of an agent whose fencing deadline passes (started by the agent)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dataDir == "" {
				return usageError("berth guard: --data-dir is required")
			}
			if pprofAddr != "" {
				stop, err := servePprof(pprofAddr)
				if err != nil {
					return err
				}
				defer stop()
			}
			return runGuard(dataDir, cgroupRoot)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the agent's data_dir (holds guard.sock)")
	cmd.Flags().StringVar(&cgroupRoot, "cgroup-root", "", "the agent's cgroup_root")
	cmd.Flags().StringVar(&pprofAddr, "pprof", "", "serve Go's net/http/pprof profiles on this address (host:port), for profiling; off by default")
	_ = cmd.Flags().MarkHidden("pprof")
	return cmd
}

// runGuard serves as the guard until released or until it has killed
// every job. It ignores SIGTERM, SIGINT and SIGHUP: the agent ends it
// (release) once its jobs are stopped, and a unit's stop signal reaches
// the agent, which stops the jobs itself. Another guard serving dataDir
// is no error: that one does the work.
func runGuard(dataDir, cgroupRoot string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	err := guard.Serve(context.Background(), guard.ServeOptions{
		DataDir: dataDir, CgroupRoot: cgroupRoot, Log: log, Ready: guard.NotifyReady,
		// This very program, even when its file has been replaced (an
		// upgrade) since the guard started.
		JobsInit: []string{"/proc/self/exe", worker.JobsInitCommand},
	})
	if errors.Is(err, guard.ErrRunning) {
		log.Info("another guard serves this data_dir; exiting", "data_dir", dataDir)
		return nil
	}
	if err != nil {
		log.Error("guard failed", "error", err)
		return fmt.Errorf("guard: %w", err)
	}
	return nil
}

// jobsInitCmd is `berth jobs-init`, hidden: the lease guard starts it as
// the init of the PID namespace its jobs run in (worker.RunJobsInit).
func jobsInitCmd() *cobra.Command {
	return &cobra.Command{
		Use:    worker.JobsInitCommand,
		Short:  "be the init of the lease guard's jobs namespace (started by the guard)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return worker.RunJobsInit()
		},
	}
}
