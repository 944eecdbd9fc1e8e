package worker

import (
	"bytes"
	"container/list"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writes records every Write as one chunk.
type writes struct{ chunks []string }

func (w *writes) Write(p []byte) (int, error) {
	w.chunks = append(w.chunks, string(p))
	return len(p), nil
}

// The log copy writes whole lines only, however the pipe's reads cut them;
// a line longer than maxLine goes in pieces (of at most two reads); the last line without
// a newline is written at the end; a pipe that wrote nothing kept no
// buffer.
func TestLogCopyKeepsLinesWhole(t *testing.T) {
	var w writes
	p := &logPipe{sink: &w, rfd: -1, done: make(chan struct{})}
	p.consume([]byte("one\ntw"))
	if p.partial == nil {
		t.Fatal("a cut line was not kept")
	}
	p.consume([]byte("o\nthr"))
	p.consume([]byte("ee"))
	p.consume([]byte("\nfour\nfive\n"))
	if p.partial != nil {
		t.Errorf("buffer kept after whole lines: %q", p.partial)
	}
	long := strings.Repeat("x", 2*maxLine+10)
	p.consume([]byte(long[:100]))
	p.consume([]byte(long[100:] + "\nlast"))
	p.finish(nil)
	want := []string{"one\n", "two\n", "three\n", "four\nfive\n"}
	if !slices.Equal(w.chunks[:4], want) {
		t.Fatalf("chunks %q, want %q first", w.chunks[:4], want)
	}
	rest := strings.Join(w.chunks[4:], "")
	if rest != long+"\nlast" {
		t.Fatalf("long line and last line came out as %d bytes", len(rest))
	}
	for _, c := range w.chunks[4:] {
		if len(c) > 2*maxLine {
			t.Errorf("a chunk of %d bytes, over 2×maxLine", len(c))
		}
	}
	select {
	case <-p.done:
	default:
		t.Error("done not closed by finish")
	}
}

// Rotation keeps MaxFiles rotated files of this log, even when several
// rotations fall in one millisecond (the time stamp's resolution), and
// leaves another job's log whose name starts the same alone.
func TestLogFilePrunesOnlyItsOwnBackups(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "job-2.log")
	if err := os.WriteFile(other, []byte("other job\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := LogConfig{Path: filepath.Join(dir, "job.log"), MaxBytes: 1, MaxFiles: 2}.Open()
	defer f.Close()
	line := bytes.Repeat([]byte("y"), 1<<20-1)
	line = append(line, '\n')
	for range 5 {
		if _, err := f.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	// job.log, two rotated files, job-2.log.
	if len(names) != 4 || !slices.Contains(names, "job-2.log") || !slices.Contains(names, "job.log") {
		t.Fatalf("files %v", names)
	}
}

// Past the bound of open log files, the one written least recently is
// closed, and opened again, appending, at its next write: no line is lost
// and no more than the bound are open.
func TestLogFilesOpenAreBounded(t *testing.T) {
	saved := openLogs
	openLogs = &logCache{max: 2, lru: list.New()}
	defer func() { openLogs = saved }()
	dir := t.TempDir()
	open := func() int {
		n := 0
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && filepath.Dir(l) == dir {
				n++
			}
		}
		return n
	}
	var files []io.WriteCloser
	for i := range 5 {
		f := LogConfig{Path: filepath.Join(dir, fmt.Sprintf("job%d.log", i))}.Open()
		defer f.Close()
		files = append(files, f)
	}
	for round := range 2 {
		for i, f := range files {
			if _, err := fmt.Fprintf(f, "line %d of job %d\n", round, i); err != nil {
				t.Fatal(err)
			}
			if n := open(); n > 2 {
				t.Fatalf("%d log files open, bound 2", n)
			}
		}
	}
	for i := range files {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("job%d.log", i)))
		if want := fmt.Sprintf("line 0 of job %d\nline 1 of job %d\n", i, i); err != nil || string(b) != want {
			t.Errorf("job%d.log = %q (%v), want %q", i, b, err, want)
		}
	}
	for _, f := range files {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
	if n := open(); n != 0 || openLogs.lru.Len() != 0 {
		t.Errorf("after Close: %d files open, %d in the cache", n, openLogs.lru.Len())
	}
}
