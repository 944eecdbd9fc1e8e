//go:build soak

package soak

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/berthd/berth/test/soak/fence"
)

// historyTail is the resource's record as the test reads it: the history
// file, read as it grows, each whole new line fed to the checker in the
// order the kernel appended it. It also keeps what the fault rounds wait
// on: which processes of a job have written, and which run of a job began
// last. Only the test's goroutine uses it.
type historyTail struct {
	t     testing.TB
	path  string
	out   *os.File // the test's own handle, for the round lines
	in    *os.File
	part  []byte // an incomplete last line, read before its end
	check *fence.Checker
	lines int
	// bad are lines that did not parse: a torn or interleaved write, a
	// record the resource could not have taken. The first few are kept.
	bad    int
	badEgs []string
	wrote  map[string]map[int]bool // job -> pids with an attempt
	newest map[string]fence.Record // job -> an attempt of the run that began last
	runs   map[string]bool         // job+" "+run seen
	byJob  map[string]map[fence.RecordKind]int
	last   map[string]fence.Record // job -> its last attempt or held write
}

// newHistoryTail makes the empty history file at path (emptying one
// that is there).
func newHistoryTail(t testing.TB, path string) *historyTail {
	t.Helper()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	in, err := os.Open(path)
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	t.Cleanup(func() { out.Close(); in.Close() })
	return &historyTail{t: t, path: path, out: out, in: in, check: fence.NewChecker(),
		wrote: map[string]map[int]bool{}, newest: map[string]fence.Record{}, runs: map[string]bool{},
		byJob: map[string]map[fence.RecordKind]int{}, last: map[string]fence.Record{}}
}

// mark appends a round's begin or end line, stamped with CLOCK_BOOTTIME.
func (h *historyTail) mark(kind fence.RecordKind, round int, fault string) {
	h.t.Helper()
	r := fence.Record{Kind: kind, Round: round, Fault: fault, At: boottime()}
	if _, err := h.out.Write([]byte(r.Line() + "\n")); err != nil {
		h.t.Fatalf("history: %v", err)
	}
}

// refresh reads what was appended since the last call and feeds it.
func (h *historyTail) refresh() {
	buf := make([]byte, 256<<10)
	for {
		n, err := h.in.Read(buf)
		if n > 0 {
			data := append(h.part, buf[:n]...)
			end := bytes.LastIndexByte(data, '\n')
			if end < 0 {
				h.part = data
			} else {
				for _, line := range strings.Split(string(data[:end]), "\n") {
					h.feed(line)
				}
				h.part = append([]byte(nil), data[end+1:]...)
			}
		}
		if err == io.EOF || n == 0 {
			return
		}
		if err != nil {
			h.t.Fatalf("history: %v", err)
		}
	}
}

func (h *historyTail) feed(line string) {
	h.lines++
	r, err := fence.Parse(line)
	if err != nil {
		h.bad++
		if len(h.badEgs) < 5 {
			h.badEgs = append(h.badEgs, err.Error())
		}
		return
	}
	h.check.Feed(r)
	if r.Kind == fence.Held || r.Kind == fence.Attempt {
		if h.byJob[r.Job] == nil {
			h.byJob[r.Job] = map[fence.RecordKind]int{}
		}
		h.byJob[r.Job][r.Kind]++
		h.last[r.Job] = r
	}
	if r.Kind != fence.Attempt {
		return
	}
	if h.wrote[r.Job] == nil {
		h.wrote[r.Job] = map[int]bool{}
	}
	h.wrote[r.Job][r.PID] = true
	key := r.Job + " " + r.Run
	if !h.runs[key] {
		h.runs[key] = true
		if n, ok := h.newest[r.Job]; !ok || r.RunStart > n.RunStart {
			h.newest[r.Job] = r
		}
	}
}

// wroteBy reports whether process pid has written an attempt for job.
func (h *historyTail) wroteBy(job string, pid int) bool {
	h.refresh()
	return h.wrote[job][pid]
}

// newestRun is an attempt of the run of job that began last; ok is false
// when job has not written.
func (h *historyTail) newestRun(job string) (r fence.Record, ok bool) {
	h.refresh()
	r, ok = h.newest[job]
	return r, ok
}
