package fencing

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/berthd/berth/internal/atomicfile"
)

// RecordPath is the record of the fencing tokens an agent with data_dir
// dataDir handed out: <data_dir>/fencing, outside <data_dir>/etcd (the
// embedded store's data), so that it survives that data's loss.
func RecordPath(dataDir string) string { return filepath.Join(dataDir, "fencing") }

// recordHeader is the first line of a record, with its format's version.
const recordHeader = "berth-fencing 1"

// Record is the highest fencing token this agent's data_dir handed out
// per job, and the highest store revision it has seen, as its file
// (RecordPath) holds them. Hand checks new tokens against it and writes
// them before a run starts. Its methods are safe for concurrent use.
type Record struct {
	path  string
	write func(path string, data []byte, perm os.FileMode) error // atomicfile.WriteFile; a test's hook

	mu      sync.Mutex
	cond    *sync.Cond // writing ended
	highest map[string]uint64
	// floor is the highest store revision the file held when opened (an
	// earlier agent saw it): every token of a store that never went back
	// exceeds it. seen is the highest revision known now, written with
	// the next batch.
	floor, seen uint64
	open        *batch // the tokens the next write takes; nil: none
	writing     bool
}

// batch is the tokens of one write (group commit): every Hand that comes
// while another write is under way joins the next batch.
type batch struct {
	written bool
	err     error
}

// Hand is one token to hand out: the store revision Token at which job
// Job's claim was written, for its next run, when the store's highest
// revision seen before that write was Seen (cluster.Claimed).
type Hand struct {
	Job   string
	Token uint64
	Seen  uint64
}

// BehindError is a token Hand refused: it would not exceed Highest, the
// highest token handed out for Job here, or Seen, the highest store
// revision seen here, so the store's revisions went back (its data was
// lost, or it was restored from an older snapshot). A resource that
// checks the job's tokens would refuse every write of a run with it.
type BehindError struct {
	Job     string
	Token   uint64
	Highest uint64 // 0: no token recorded for Job
	Seen    uint64
	Path    string // the record
}

func (e *BehindError) Error() string {
	past, what := e.Highest, "the highest berth handed out for it"
	if e.Token > e.Highest {
		past, what = e.Seen, "the highest store revision berth has seen"
	}
	return fmt.Sprintf("job %s: refused to start: its fencing token %d would not exceed %d, %s (%s): "+
		"the store's revisions went back (its data was lost, or it was restored from an older snapshot), and a resource "+
		"that checks the job's tokens would refuse every write of this run. Restore the store with its revisions bumped "+
		"past %d (etcdutl snapshot restore SNAPSHOT --bump-revision %d --mark-compacted), or, once no resource checks "+
		"this job's tokens, stop the agent and move %s aside (docs/fencing.md)",
		e.Job, e.Token, past, what, e.Path, past, past, e.Path)
}

// OpenRecord reads the record at path (RecordPath); a missing file is an
// empty record. Errors: the file cannot be read, or a line is not of its
// format (the error names the file and line; the record is not
// replaced: move it aside only once no resource checks the tokens).
func OpenRecord(path string) (*Record, error) {
	r := &Record{path: path, write: atomicfile.WriteFile, highest: map[string]uint64{}}
	r.cond = sync.NewCond(&r.mu)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the fencing record: %w", err)
	}
	if err := r.parse(b); err != nil {
		return nil, err
	}
	r.floor = r.seen
	return r, nil
}

// parse reads a record's file b into r.
func (r *Record) parse(b []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n, header := 0, false
	bad := func(format string, args ...any) error {
		return fmt.Errorf("fencing record %s:%d: %s", r.path, n, fmt.Sprintf(format, args...))
	}
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !header {
			if line != recordHeader {
				return bad("%q, want %q first", line, recordHeader)
			}
			header = true
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "revision":
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return bad("revision %q: %v", f[1], err)
			}
			r.seen = max(r.seen, v)
		case len(f) == 3 && f[0] == "token":
			v, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				return bad("token of %s %q: %v", f[1], f[2], err)
			}
			r.highest[f[1]] = max(r.highest[f[1]], v)
			r.seen = max(r.seen, v)
		default:
			return bad("%q: want \"revision N\" or \"token JOB N\"", line)
		}
	}
	if err := sc.Err(); err != nil {
		return bad("%v", err)
	}
	if !header && n > 0 {
		return bad("no %q line", recordHeader)
	}
	return nil
}

// Path is the record's file.
func (r *Record) Path() string { return r.path }

// Highest returns the highest token handed out for job (0: none): the
// token of an adopted run whose guard did not keep it.
func (r *Record) Highest(job string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest[job]
}

// Seen returns the highest store revision the record knows.
func (r *Record) Seen() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

// Hand checks each token of hs and, in one write of the record with every
// other Hand under way (group commit), records those it accepts, and
// returns once they are on disk: errs[i] says why hs[i] must not be
// handed to a run, nil when it may. A token is refused (a *BehindError)
// when it does not exceed the highest recorded for its job, the highest
// store revision the record held when opened, or its own Seen; an
// accepted one is recorded at once, so a later token of the job must
// exceed it even when the write fails. A failed write (full disk, a
// read-only data_dir) is every accepted token's error: the runs must not
// start, since the next agent would not know their tokens.
func (r *Record) Hand(hs []Hand) (errs []error) {
	errs = make([]error, len(hs))
	r.mu.Lock()
	defer r.mu.Unlock()
	var mine []int
	for i, h := range hs {
		floor := max(r.floor, h.Seen)
		if h.Token <= r.highest[h.Job] || h.Token <= floor {
			errs[i] = &BehindError{Job: h.Job, Token: h.Token, Highest: r.highest[h.Job], Seen: floor, Path: r.path}
			continue
		}
		r.highest[h.Job] = h.Token
		r.seen = max(r.seen, h.Token, h.Seen)
		mine = append(mine, i)
	}
	if len(mine) == 0 {
		return errs
	}
	if r.open == nil {
		r.open = &batch{}
	}
	if err := r.commit(r.open); err != nil {
		for _, i := range mine {
			errs[i] = fmt.Errorf("job %s: not started: its fencing token %d cannot be recorded: %w", hs[i].Job, hs[i].Token, err)
		}
	}
	return errs
}

// commit returns once batch b is written, with the write's error: the
// caller writes it, and every batch that opens meanwhile, unless another
// caller is writing, whose write b then waits for. mu is held.
func (r *Record) commit(b *batch) error {
	for !b.written {
		if r.writing {
			r.cond.Wait()
			continue
		}
		w := r.open
		r.open, r.writing = nil, true
		data := r.encode()
		r.mu.Unlock()
		err := r.write(r.path, data, 0o600)
		r.mu.Lock()
		w.written, w.err, r.writing = true, err, false
		r.cond.Broadcast()
	}
	return b.err
}

// encode is the record's file: its header, the highest revision seen,
// and one line per job, sorted. mu is held.
func (r *Record) encode() []byte {
	var b bytes.Buffer
	b.Grow(64 + 32*len(r.highest))
	b.WriteString("# The highest fencing token berth handed out for each job on this host, and the highest store\n" +
		"# revision it has seen: a new token must exceed them (docs/fencing.md). Written before each run starts.\n")
	b.WriteString(recordHeader + "\n")
	fmt.Fprintf(&b, "revision %d\n", r.seen)
	for _, job := range slices.Sorted(maps.Keys(r.highest)) {
		b.WriteString("token ")
		b.WriteString(job)
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(r.highest[job], 10))
		b.WriteByte('\n')
	}
	return b.Bytes()
}
