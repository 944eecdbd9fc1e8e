package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berthd/berth/limits"
)

// runLogs prints a job's log file, <log_dir>/<job_id>.log, and with -f
// follows it across rotation, as `tail -F` does.
func runLogs(args []string) int {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	config := fs.String("config", defaultConfig, "configuration file (for agent.log_dir)")
	follow := fs.Bool("f", false, "follow the log as it grows")
	lines := fs.Int("n", 0, "print only the last N lines (0: all)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: berth logs [--config FILE] [-f] [-n LINES] JOB")
		return 2
	}
	job := fs.Arg(0)
	cfg, err := limits.Load(*config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// The job may come from the cluster's store, not this file: any job ID
	// that has a log here is fine, but it must be a plain name.
	if job == "" || strings.ContainsAny(job, "/\x00") || strings.HasPrefix(job, ".") {
		fmt.Fprintf(os.Stderr, "berth logs: %q is not a job ID\n", job)
		return 2
	}
	path := filepath.Join(cfg.Agent.LogDir, job+".log")
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "berth logs: %s has no log yet (%s)\n", job, path)
		} else {
			fmt.Fprintf(os.Stderr, "berth logs: %v\n", err)
		}
		return 1
	}
	defer f.Close()
	if err := printTail(f, *lines); err != nil {
		fmt.Fprintf(os.Stderr, "berth logs: read %s: %v\n", path, err)
		return 1
	}
	if !*follow {
		return 0
	}
	return followFile(f, path)
}

// printTail copies the last n lines of f (all when n <= 0) to stdout and
// leaves f at its end.
func printTail(f *os.File, n int) error {
	if n <= 0 {
		_, err := io.Copy(os.Stdout, f)
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
		fmt.Println(l)
	}
	return sc.Err()
}

// followFile prints what is appended to path, reopening it when the agent
// rotates it (a new inode, or the file got shorter).
func followFile(f *os.File, path string) int {
	for {
		if _, err := io.Copy(os.Stdout, f); err != nil {
			fmt.Fprintf(os.Stderr, "berth logs: read %s: %v\n", path, err)
			return 1
		}
		time.Sleep(250 * time.Millisecond)
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
				_, _ = io.Copy(os.Stdout, f)
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
