package daemon

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/berthd/berth/api"
)

// traceLines and traceBytes bound the log tail in a FAILED job's trace:
// the last traceLines lines within the last traceBytes bytes of its log.
const (
	traceLines = 20
	traceBytes = 8 << 10
)

// trace is why job j is FAILED, as Kafka Connect's status trace carries
// a task's failure: the start error, or how its last run ended (exit
// status, signal, OOM kill), then the last lines of its log file
// (<logDir>/<id>.log, with berth's own "berth: ..." marker lines).
func trace(logDir string, j api.Job) string {
	var b strings.Builder
	switch {
	case j.Reason != "":
		b.WriteString(j.Reason)
	case j.LastExit != nil:
		b.WriteString(j.LastExit.Reason)
	}
	file := path.Join(logDir, j.ID+".log")
	if tail := logTail(file, traceLines, traceBytes); tail != "" {
		fmt.Fprintf(&b, "\nlast lines of %s:\n%s", file, tail)
	}
	return b.String()
}

// logTail returns up to n whole lines from the last limit bytes of file, ""
// when it cannot be read.
func logTail(file string, n int, limit int64) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(0, fi.Size()-limit)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
		return ""
	}
	if off > 0 {
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			buf = buf[i+1:] // drop the partial first line
		}
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
