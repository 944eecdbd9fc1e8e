package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/berthd/berth/config"
	"github.com/spf13/cobra"
)

func logsCmd(configPath *string) *cobra.Command {
	var follow bool
	var lines int
	c := &cobra.Command{
		Use:   "logs JOB",
		Short: "Print a job's output",
		Long: `Print a job's log file, <log_dir>/<job_id>.log: what the job wrote to
stdout and stderr, with berth's own "berth: ..." lines (start, exit, restart)
in order. With -f it follows the file across rotation, as tail -F does.

Only agent.log_dir of --config is read, so this works while the file does
not validate.`,
		Example: `  berth logs orders-sink-0
  berth logs -f -n 50 orders-sink-0`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			job := args[0]
			// The job may come from the cluster's store, not this file: any
			// job ID that has a log here is fine, but it must be a plain name.
			if job == "" || strings.ContainsAny(job, "/\x00") || strings.HasPrefix(job, ".") {
				return usageError("%q is not a job ID", job)
			}
			dir, err := logDirOf(cmd.ErrOrStderr(), *configPath)
			if err != nil {
				return configError(err)
			}
			path := filepath.Join(dir, job+".log")
			f, err := os.Open(path)
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%s has no log yet (%s)", job, path)
			}
			if err != nil {
				return err
			}
			defer f.Close()
			out := cmd.OutOrStdout()
			if err := printTail(out, f, lines); err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			if !follow {
				return nil
			}
			return followFile(cmd.Context(), out, f, path)
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log as it grows")
	c.Flags().IntVarP(&lines, "lines", "n", 0, "print only the last N lines (0: all)")
	return c
}

// logDirOf returns agent.log_dir of the configuration file, reading only
// that key when the file does not validate (with a warning on warn).
func logDirOf(warn io.Writer, path string) (string, error) {
	cfg, err := config.Load(path, nil)
	if err == nil {
		return cfg.Agent.LogDir, nil
	}
	var raw struct {
		Agent struct {
			LogDir string `toml:"log_dir"`
		} `toml:"agent"`
	}
	if _, derr := toml.DecodeFile(path, &raw); derr != nil {
		return "", err
	}
	fmt.Fprintf(warn, "warning: %s does not validate; using its log_dir:\n%v\n", path, err)
	if raw.Agent.LogDir == "" {
		return config.DefaultLogDir, nil
	}
	return raw.Agent.LogDir, nil
}

// printTail copies the last n lines of f (all when n <= 0) to w and leaves
// f at its end.
func printTail(w io.Writer, f *os.File, n int) error {
	if n <= 0 {
		_, err := io.Copy(w, f)
		return err
	}
	ring := make([]string, 0, n)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		if len(ring) == n {
			ring = ring[1:]
		}
		ring = append(ring, sc.Text())
	}
	for _, l := range ring {
		fmt.Fprintln(w, l)
	}
	return sc.Err()
}

// followFile prints what is appended to path until ctx ends, reopening it
// when the agent rotates it (a new inode, or the file got shorter).
func followFile(ctx context.Context, w io.Writer, f *os.File, path string) error {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := io.Copy(w, f); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 != nil || err2 != nil {
			continue
		}
		pos, _ := f.Seek(0, io.SeekCurrent)
		if !os.SameFile(cur, now) || now.Size() < pos {
			// Rotated: what was written to the old file after the last
			// read is still there; print it before switching.
			if !os.SameFile(cur, now) {
				_, _ = io.Copy(w, f)
			}
			nf, err := os.Open(path)
			if err != nil {
				continue
			}
			f.Close()
			f = nf
		}
	}
}
