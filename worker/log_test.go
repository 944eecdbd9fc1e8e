package worker

import (
	"bytes"
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
