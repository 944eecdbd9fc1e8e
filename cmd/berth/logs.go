package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

func logsCmd(configPath *string) *cobra.Command {
	var follow, stamps bool
	var lines int
	var logDir string
	c := &cobra.Command{
		Use:   "logs JOB|CONNECTOR",
		Short: "Print a job's output, or every job's of a connector",
		Long: `Print a job's log file, <log_dir>/<job_id>.log: what the job wrote to
stdout and stderr, with berth's own "berth: ..." lines (start, exit, restart)
in order. With -f it follows the file across rotation, as tail -F does.

Given a connector's name, it prints the logs of all of the connector's jobs
found in log_dir (its own job and every task, <name>-<n>), one after the
other, each line prefixed with its job ID; with -f it follows them all
together. -t prefixes each line with the time berth logs received it, to
the millisecond (lines already in a file when the command started have no
known time and show "-").

Only agent.log_dir of --config is read, so this works while the file does
not validate; --log-dir names the directory without reading the file at all.
When the file cannot be read or is not TOML (an incident is when logs are
needed most), the command warns and reads the default log_dir.`,
		Example: `  berth logs orders-sink-0
  berth logs -f -n 50 orders-sink-0
  berth logs -f -t orders-sink      # the connector's job and all its tasks
  berth logs --log-dir /var/log/berth orders-sink-0`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if lines < 0 {
				return usageError("--lines (-n) must be 0 (all) or a positive number of lines, not %d", lines)
			}
			name := args[0]
			// The job may come from the cluster's store, not this file: any
			// job ID that has a log here is fine, but it must be a plain name.
			if name == "" || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") {
				return usageError("%q is not a job ID or connector name", name)
			}
			dir := logDir
			if dir == "" {
				dir = logDirOf(cmd.ErrOrStderr(), *configPath)
			}
			ids, err := logsOf(dir, name)
			if err != nil {
				return err
			}
			prefix := len(ids) > 1
			width := 0
			for _, id := range ids {
				width = max(width, len(id))
			}
			out := &lineOut{w: cmd.OutOrStdout()}
			var files []*os.File
			defer func() {
				for _, f := range files {
					f.Close()
				}
			}()
			for _, id := range ids {
				path := filepath.Join(dir, id+".log")
				f, err := os.Open(path)
				if err != nil {
					return err
				}
				files = append(files, f)
				lw := out.writer(prefixOf(id, width, prefix), stamps, true)
				if err := printTail(lw, f, lines); err != nil {
					return fmt.Errorf("read %s: %w", path, err)
				}
				lw.flush()
			}
			if !follow {
				return nil
			}
			var wg sync.WaitGroup
			errs := make([]error, len(ids))
			for i, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					lw := out.writer(prefixOf(id, width, prefix), stamps, false)
					errs[i] = followFile(cmd.Context(), lw, files[i], filepath.Join(dir, id+".log"))
					lw.flush()
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log(s) as they grow")
	c.Flags().IntVarP(&lines, "lines", "n", 0, "print only the last N lines of each log (0: all)")
	c.Flags().BoolVarP(&stamps, "timestamps", "t", false, "prefix each line with the time it was received (RFC 3339, ms)")
	c.Flags().StringVar(&logDir, "log-dir", "", "read the logs in this directory, not --config's agent.log_dir (the file is not read)")
	return c
}

// logsOf returns the job IDs whose logs "berth logs NAME" prints, found in
// dir: the connector NAME's own job (NAME.log) and its tasks
// (NAME-<n>.log, by n) when any task's log is there, else the job NAME
// alone. It returns an error naming dir when neither exists.
func logsOf(dir, name string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read log_dir %s: %w", dir, err)
	}
	task := regexp.MustCompile("^" + regexp.QuoteMeta(name) + `-(0|[1-9][0-9]*)\.log$`)
	type t struct {
		id string
		n  int
	}
	var tasks []t
	own := false
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() == name+".log" {
			own = true
		}
		if m := task.FindStringSubmatch(e.Name()); m != nil && e.Type().IsRegular() {
			n, _ := strconv.Atoi(m[1])
			tasks = append(tasks, t{strings.TrimSuffix(e.Name(), ".log"), n})
		}
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].n < tasks[j].n })
	var ids []string
	if own {
		ids = append(ids, name)
	}
	for _, x := range tasks {
		ids = append(ids, x.id)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s has no log yet: neither %s.log nor a task's %s-<n>.log is in %s", name, name, name, dir)
	}
	return ids, nil
}

// prefixOf is the line prefix of job id: "id | " padded to width, or ""
// when only one job is printed.
func prefixOf(id string, width int, on bool) string {
	if !on {
		return ""
	}
	return fmt.Sprintf("%-*s | ", width, id)
}

// lineOut writes whole lines from several logs to one writer, so that
// lines followed together never interleave mid-line.
type lineOut struct {
	mu sync.Mutex
	w  io.Writer
}

// stampLayout is the -t prefix: the time a line was received.
const stampLayout = "2006-01-02T15:04:05.000Z07:00"

// writer returns an io.Writer for one log whose complete lines go to o,
// each with prefix and, with stamps, the time it was received (backlog:
// "-", the time is not known).
func (o *lineOut) writer(prefix string, stamps, backlog bool) *lineWriter {
	return &lineWriter{o: o, prefix: prefix, stamps: stamps, backlog: backlog}
}

// lineWriter splits one log's bytes into lines for a lineOut.
type lineWriter struct {
	o       *lineOut
	prefix  string
	stamps  bool
	backlog bool
	partial []byte
}

// Write implements io.Writer: complete lines are written at once, a
// trailing partial line waits for its newline (or flush).
func (l *lineWriter) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		if err := l.emit(l.partial[:i+1]); err != nil {
			return len(p), err
		}
		l.partial = l.partial[i+1:]
	}
}

// flush writes a trailing partial line, ending it with a newline.
func (l *lineWriter) flush() {
	if len(l.partial) > 0 {
		_ = l.emit(append(l.partial, '\n'))
		l.partial = nil
	}
}

func (l *lineWriter) emit(line []byte) error {
	var head string
	if l.stamps {
		if l.backlog {
			head = fmt.Sprintf("%-*s ", len(stampLayout)+1, "-")
		} else {
			head = time.Now().Format(stampLayout) + " "
		}
	}
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	_, err := io.WriteString(l.o.w, head+l.prefix+string(line))
	return err
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
// when the agent rotates it (a new inode, or the file got shorter). f stays
// the caller's to close.
func followFile(ctx context.Context, w io.Writer, f *os.File, path string) error {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	first := f
	defer func() {
		if f != first {
			f.Close() // the file reopened after a rotation
		}
	}()
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
			if f != first {
				f.Close()
			}
			f = nf
		}
	}
}
