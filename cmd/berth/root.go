package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/berthd/berth/config"

	"github.com/spf13/cobra"
)

// defaultConfig is the agent file the package installs.
const defaultConfig = "/etc/berth/berth.toml"

// exitError carries a command's exit status with its error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError is a bad command line: exit status 2.
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// configError is a configuration that does not validate: exit status 2.
func configError(err error) error { return &exitError{code: 2, err: err} }

// commands is the one table of berth's commands, in the order help lists
// them.
func commands(configPath *string) []*cobra.Command {
	return []*cobra.Command{
		agentCmd(configPath),
		validateCmd(configPath),
		reloadCmd(configPath),
		upgradeCmd(configPath),
		statusCmd(configPath),
		topCmd(configPath),
		recommendCmd(configPath),
		logsCmd(configPath),
		applyCmd(configPath),
		connectorsCmd(configPath),
		restartCmd(configPath),
		pauseCmd(configPath),
		resumeCmd(configPath),
		stopCmd(configPath),
		membersCmd(configPath),
		versionCmd(),
		gendocsCmd(),
		guardCmd(),
		jobsInitCmd(),
	}
}

// newRoot builds the command tree.
func newRoot() *cobra.Command {
	var configPath string
	root := &cobra.Command{
		Use:   "berth",
		Short: "berth runs one worker per assigned job, each in its own cgroup, tied to cluster membership",
		Long: `berth is a host agent for Linux. It runs one worker process for each job
assigned to its host, each inside its own cgroup with CPU, memory, I/O and
pids limits; reports every job's usage as Prometheus metrics; and ties every
worker's lifetime to cluster membership (etcd leases), so that no job ever
runs unseen or twice.`,
		Version:       version + " (commit " + commit + ")",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("berth {{.Version}}\n")
	root.PersistentFlags().StringVarP(&configPath, "config", "c", defaultConfig, "agent configuration file")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: 2, err: fmt.Errorf("%w (run '%s -h' for usage)", err, c.CommandPath())}
	})
	root.AddCommand(commands(&configPath)...)
	setupCompletion(root, &configPath)
	return root
}

// run executes the command line args and returns the exit status.
func run(args []string) int {
	root := newRoot()
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var ee *exitError
	code := 1
	if errors.As(err, &ee) {
		code = ee.code
	} else if cmd == root || isArgsError(err) {
		code = 2 // unknown command, wrong number of arguments
	}
	printError(os.Stderr, cmd.CommandPath(), err)
	return code
}

// printError prints a command's error as "CMD: error"; for a
// configuration with several problems, a header line "CMD: FILE: N
// problems" and then each problem on its own line (FILE:LINE:COL: key:
// message). Any other error of several lines is a header line (a refused
// reload) followed by its problems already, and is printed as it is.
func printError(w io.Writer, cmdPath string, err error) {
	msg := err.Error()
	var ps *config.Problems
	if errors.As(err, &ps) && len(ps.List) > 1 && ps.Error() == msg {
		file := ""
		for _, p := range ps.List {
			if p.File != "" {
				file = p.File + ": "
				break
			}
		}
		fmt.Fprintf(w, "%s: %s%d problems\n%s\n", cmdPath, file, len(ps.List), msg)
		return
	}
	fmt.Fprintf(w, "%s: %s\n", cmdPath, msg)
}

// isArgsError reports whether err came from cobra's argument checks.
func isArgsError(err error) bool {
	var ae *argsError
	return errors.As(err, &ae)
}

// argsError is a wrong number of positional arguments.
type argsError struct{ msg string }

func (e *argsError) Error() string { return e.msg }

// exactArgs is cobra.ExactArgs with a message that shows the usage line.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return &argsError{fmt.Sprintf("want %d argument(s), got %d\nUsage: %s", n, len(args), cmd.UseLine())}
		}
		return nil
	}
}

// noArgs refuses positional arguments.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return &argsError{fmt.Sprintf("unexpected argument %q\nUsage: %s", args[0], cmd.UseLine())}
	}
	return nil
}
