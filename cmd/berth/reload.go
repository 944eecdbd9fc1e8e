package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/daemon"
	"github.com/spf13/cobra"
)

func reloadCmd(configPath *string) *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "reload",
		Short: "Make the running agent re-read its file, and print the result",
		Long: `Send SIGHUP to the agent that runs with --config (its PID is in
<data_dir>/agent.lock, and must be the PID its API at agent.listen reports),
wait until it has finished the reload, and print the result: the SHA-256 of
the file it read, every setting it changed ("key: old → new") and its
warnings, or why it refused the file (a refused reload changes nothing: the
agent keeps its previous configuration and every job as it was).

The result is the agent's own (GET /v1/agent, config.last_reload): the
command waits for config.reloads to grow, and for a result of the file as it
is on disk now, should another reload have been running.

The agent re-reads only the file it was started with: when it runs another
file than --config (compared as absolute paths, symbolic links resolved),
nothing is signalled and the command fails naming both.

Exit status: 0 when the reload was accepted, 1 when the agent refused it,
no agent runs, it runs another file, or no result came within --timeout, 2
for a bad command line.`,
		Example: `  berth reload
  berth reload -c /etc/berth/berth.toml --timeout 2m`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			pid, cl, before, err := runningAgent(ctx, cmd.ErrOrStderr(), *configPath)
			if err != nil {
				return err
			}
			if !sameConfigFile(before.Config.File, pid, *configPath) {
				return fmt.Errorf("the agent (pid %d) runs %s, not %s: it re-reads only its own file on reload (run berth reload -c %s, or restart the agent with --config %s)",
					pid, before.Config.File, *configPath, before.Config.File, *configPath)
			}
			if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
				return fmt.Errorf("signal the agent (pid %d): %w", pid, err)
			}
			r, err := waitReload(ctx, cl, before.Config.Reloads, *configPath)
			if err != nil {
				return err
			}
			return printReload(cmd.OutOrStdout(), before.Config.File, r)
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the agent's result (a reload that stops jobs takes their stop_timeout)")
	return c
}

// sameConfigFile reports whether the agent with pid, which runs the file
// it names agentFile (relative to its own working directory, read from
// /proc/PID/cwd, when it is relative), and path name the same file:
// absolute, cleaned, symbolic links resolved (when a path does not resolve,
// it is compared as it is).
func sameConfigFile(agentFile string, pid int, path string) bool {
	if !filepath.IsAbs(agentFile) {
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil {
			agentFile = filepath.Join(cwd, agentFile)
		}
	}
	return canonical(agentFile) == canonical(path)
}

// canonical is path absolute and cleaned, with symbolic links resolved
// when it resolves.
func canonical(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return filepath.Clean(path)
}

// agentPID reads the PID an agent wrote into its lock file.
func agentPID(lock string) (int, error) {
	b, err := os.ReadFile(lock)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("no agent runs with this data_dir: %s does not exist", lock)
	}
	if err != nil {
		return 0, fmt.Errorf("read the agent's pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("no agent runs with this data_dir: %s holds no pid (%q)", lock, strings.TrimSpace(string(b)))
	}
	return pid, nil
}

// waitReload polls the agent until it reports a reload after seq, of the
// file at path as it is on disk now (another reload may have been running
// when the signal came; the agent then reloads once more).
func waitReload(ctx context.Context, cl *api.Client, seq uint64, path string) (*api.Reload, error) {
	var last *api.Reload
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		a, err := cl.Agent(ctx)
		if err == nil && a.Config.Reloads > seq && a.Config.LastReload != nil {
			last = a.Config.LastReload
			if data, err := os.ReadFile(path); err != nil || hexSum(data) == last.SHA256 {
				return last, nil
			}
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return last, nil // the file changed meanwhile: the last result
			}
			return nil, fmt.Errorf("no reload result from the agent in time (is a reload still stopping jobs? see its log): %w", ctx.Err())
		case <-t.C:
		}
	}
}

// printReload prints one reload's result; a refused reload is an error.
func printReload(w io.Writer, file string, r *api.Reload) error {
	short := r.SHA256
	if len(short) > 12 {
		short = short[:12]
	}
	if !r.Successful {
		return fmt.Errorf("reload %d of %s (sha256 %s) refused; the agent keeps its previous configuration:\n%s", r.Seq, file, short, r.Error)
	}
	fmt.Fprintf(w, "reload %d of %s (sha256 %s) accepted: %s\n", r.Seq, file, short, plural(len(r.Changes), "change"))
	for _, c := range r.Changes {
		fmt.Fprintf(w, "  %s\n", c)
	}
	for _, x := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", x)
	}
	return nil
}

func hexSum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// runningAgent finds the agent that runs with the file at path, before a
// command signals it: its pid from <data_dir>/agent.lock, a client of its
// API at agent.listen, and its answer to GET /v1/agent, which must report
// the same pid (never signal a pid the lock file names but another
// process holds). Errors: the file does not load (exit status 2), no agent
// runs, it does not answer, or the pids differ.
func runningAgent(ctx context.Context, warn io.Writer, path string) (int, *api.Client, api.Agent, error) {
	ag, err := agentOf(warn, path)
	if err != nil {
		return 0, nil, api.Agent{}, configError(err)
	}
	pid, err := agentPID(daemon.LockFile(ag.DataDir))
	if err != nil {
		return 0, nil, api.Agent{}, err
	}
	cl, err := clientOf(ag, "")
	if err != nil {
		return 0, nil, api.Agent{}, err
	}
	a, err := cl.Agent(ctx)
	if err != nil {
		return 0, nil, api.Agent{}, fmt.Errorf("the agent (pid %d) does not answer at %s: %w", pid, ag.Listen, err)
	}
	if a.PID != pid {
		return 0, nil, api.Agent{}, fmt.Errorf("the agent at %s has pid %d, but %s names pid %d: not signalling", ag.Listen, a.PID, daemon.LockFile(ag.DataDir), pid)
	}
	return pid, cl, a, nil
}
