package worker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"gopkg.in/natefinch/lumberjack.v2"
)

// LogConfig is a job's size-rotated log file, <log_dir>/<job_id>.log.
type LogConfig struct {
	// Path of the live log file; rotated files sit beside it with a time
	// stamp in their name (lumberjack's scheme).
	Path string
	// MaxBytes is the size in bytes at which the file is rotated. lumberjack
	// counts whole mebibytes, so it is rounded up to a multiple of 1 MiB;
	// 0 means lumberjack's default, 100 MiB.
	MaxBytes int64
	// MaxFiles is the number of rotated files kept besides the live one;
	// 0 means 5.
	MaxFiles int
}

// defaultMaxFiles is LogConfig.MaxFiles when 0 (lumberjack's own 0 would
// keep every rotated file forever).
const defaultMaxFiles = 5

// Open returns the rotating writer of c (a *lumberjack.Logger; the file is
// opened on first write). Its Close closes the file; note that lumberjack
// v2.2.1 keeps one goroutine per logger for pruning old files, which does
// not end on Close.
func (c LogConfig) Open() io.WriteCloser {
	const mib = 1 << 20
	files := c.MaxFiles
	if files <= 0 {
		files = defaultMaxFiles
	}
	return &lumberjack.Logger{
		Filename:   c.Path,
		MaxSize:    int((c.MaxBytes + mib - 1) / mib),
		MaxBackups: files,
	}
}

// logPipe carries a job's stdout and stderr to its sink. One pipe serves
// every run of a worker: each run's process gets the write end as fd 1 and
// 2, and the agent writes its "berth:" marker lines into the same pipe, so
// they land in order with what the job wrote before. The copier ends when
// the agent has closed its write end and every process holding one is gone.
type logPipe struct {
	r, w   *os.File
	sink   io.Writer
	closer io.Closer // closes the sink when the copier ends; nil for a caller's writer
	done   chan struct{}
}

// newLogPipe makes the pipe and starts its copier. A sink write error does not stop it (the job must never
// block on a full pipe), the data is then lost.
func newLogPipe(sink io.Writer, closer io.Closer) (*logPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create log pipe: %w", err)
	}
	p := &logPipe{r: r, w: w, sink: sink, closer: closer, done: make(chan struct{})}
	go p.copy()
	return p, nil
}

// copy moves whole lines from the pipe to the sink: each Write holds one
// or more complete lines, so a rotating sink never splits a line across
// files. A line longer than maxLine, or a last line without a newline, is
// written as it stands.
func (p *logPipe) copy() {
	defer close(p.done)
	const maxLine = 64 << 10
	buf := make([]byte, 0, 2*maxLine)
	for {
		n, err := p.r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			_, _ = p.sink.Write(buf[:i+1])
			buf = buf[:copy(buf, buf[i+1:])]
		}
		if len(buf) >= maxLine || (err != nil && len(buf) > 0) {
			_, _ = p.sink.Write(buf)
			buf = buf[:0]
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_, _ = fmt.Fprintf(p.sink, "berth: log pipe read: %v\n", err)
			}
			break
		}
	}
	_ = p.r.Close()
	if p.closer != nil {
		_ = p.closer.Close()
	}
}

// mark writes one "berth: ..." line into the pipe. Lines are far shorter
// than PIPE_BUF, so the write is atomic (pipe(7)).
func (p *logPipe) mark(format string, args ...any) {
	_, _ = fmt.Fprintf(p.w, "berth: "+format+"\n", args...)
}

// closeWriter closes the agent's write end; the copier ends once every
// process that holds the pipe is gone.
func (p *logPipe) closeWriter() { _ = p.w.Close() }
