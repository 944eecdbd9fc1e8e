package fencing

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

func openT(t testing.TB, path string) *Record {
	t.Helper()
	r, err := OpenRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Tokens handed out are on disk when Hand returns, and an agent that
// opens the record later knows each job's highest token and the highest
// revision seen.
func TestRecordKeepsTheHighestTokens(t *testing.T) {
	path := RecordPath(t.TempDir())
	r := openT(t, path)
	if r.Highest("a") != 0 || r.Seen() != 0 {
		t.Fatalf("a new record holds a=%d seen=%d", r.Highest("a"), r.Seen())
	}
	errs := r.Hand([]Hand{{Job: "a", Token: 10, Seen: 8}, {Job: "b", Token: 10, Seen: 8}})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if errs := r.Hand([]Hand{{Job: "a", Token: 14, Seen: 20}}); errs[0] == nil {
		t.Fatal("a token below the revision seen before its write was handed out")
	}
	if errs := r.Hand([]Hand{{Job: "a", Token: 25, Seen: 20}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := recordHeader + "\nrevision 25\ntoken a 25\ntoken b 10\n"
	if !strings.HasSuffix(string(b), want) {
		t.Fatalf("record:\n%s\nwant it to end with:\n%s", b, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record mode %v (%v), want 0600", fi.Mode(), err)
	}

	next := openT(t, path)
	if next.Highest("a") != 25 || next.Highest("b") != 10 || next.Seen() != 25 {
		t.Fatalf("reopened: a=%d b=%d seen=%d, want 25 10 25", next.Highest("a"), next.Highest("b"), next.Seen())
	}
}

// A token that would not exceed what was handed out before is refused with
// an error naming the job, both numbers and what to do: at or below the
// job's own highest token (the store went back), and, for a job with none,
// at or below the highest revision an earlier agent saw (a store older
// than the record). Nothing refused is recorded.
func TestRecordRefusesATokenThatGoesBack(t *testing.T) {
	path := RecordPath(t.TempDir())
	r := openT(t, path)
	if err := errors.Join(r.Hand([]Hand{{Job: "orders-0", Token: 4211, Seen: 4000}})...); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []uint64{4211, 17} {
		err := r.Hand([]Hand{{Job: "orders-0", Token: tok}})[0]
		var be *BehindError
		if !errors.As(err, &be) || be.Job != "orders-0" || be.Highest != 4211 || be.Token != tok {
			t.Fatalf("token %d after 4211: %v, want a BehindError", tok, err)
		}
		for _, want := range []string{"job orders-0", fmt.Sprintf("fencing token %d would not exceed 4211", tok),
			"the highest berth handed out for it", path, "--bump-revision 4211 --mark-compacted", "move " + path + " aside"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	}
	// An agent started later, on a store that lost its data: a job this
	// host never ran gets a revision below what the record saw.
	next := openT(t, path)
	err := next.Hand([]Hand{{Job: "new-job", Token: 5, Seen: 3}})[0]
	var be *BehindError
	if !errors.As(err, &be) || be.Highest != 0 || be.Seen != 4211 ||
		!strings.Contains(err.Error(), "would not exceed 4211, the highest store revision berth has seen") {
		t.Fatalf("a new job's token below the record's revision: %v", err)
	}
	if next.Highest("new-job") != 0 {
		t.Fatalf("a refused token was recorded: %d", next.Highest("new-job"))
	}
	if err := next.Hand([]Hand{{Job: "new-job", Token: 4212}})[0]; err != nil {
		t.Fatalf("a token above the record refused: %v", err)
	}
}

// A record that cannot be written fails every token of the write: the
// runs must not start. Once it can be written again, tokens go on from
// the highest accepted, written or not.
func TestRecordWriteFailureFailsTheTokens(t *testing.T) {
	path := RecordPath(t.TempDir())
	r := openT(t, path)
	// A directory where the file belongs: the rename over it fails, as a
	// read-only or full file system's write does.
	if err := os.MkdirAll(filepath.Join(path, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	errs := r.Hand([]Hand{{Job: "a", Token: 10}, {Job: "b", Token: 10}})
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "cannot be recorded") || !strings.Contains(err.Error(), path) {
			t.Fatalf("token %d of an unwritable record: %v", i, err)
		}
	}
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if err := r.Hand([]Hand{{Job: "a", Token: 10}})[0]; err == nil {
		t.Fatal("the token of a failed write was handed out again")
	}
	if err := r.Hand([]Hand{{Job: "a", Token: 12}})[0]; err != nil {
		t.Fatal(err)
	}
	if next := openT(t, path); next.Highest("a") != 12 || next.Highest("b") != 10 {
		t.Fatalf("after the failure: a=%d b=%d, want 12 10", next.Highest("a"), next.Highest("b"))
	}
}

// Tokens handed while a write is under way wait for one write together
// (group commit): a cold start's passes do not rewrite the file once per
// job.
func TestRecordGroupCommit(t *testing.T) {
	path := RecordPath(t.TempDir())
	r := openT(t, path)
	var (
		mu     sync.Mutex
		writes int
	)
	first := make(chan struct{})
	inFirst := make(chan struct{})
	write := r.write
	r.write = func(p string, b []byte, perm os.FileMode) error {
		mu.Lock()
		writes++
		n := writes
		mu.Unlock()
		if n == 1 {
			close(inFirst)
			<-first // held until every other Hand waits
		}
		return write(p, b, perm)
	}
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs[n] = r.Hand([]Hand{{Job: "first", Token: 1}})[0]
	}()
	<-inFirst
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Hand([]Hand{{Job: fmt.Sprintf("job-%d", i), Token: uint64(100 + i)}})[0]
		}()
	}
	testutil.Eventually(t, 10*time.Second, "every Hand waits for the write under way", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.highest) == n+1
	})
	close(first)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if writes != 2 {
		t.Fatalf("%d writes for %d tokens handed during one write, want 2", writes, n)
	}
	if next := openT(t, path); next.Highest("job-49") != 149 || next.Highest("first") != 1 {
		t.Fatalf("reopened: %d %d", next.Highest("job-49"), next.Highest("first"))
	}
}

// A file that is not a record is refused with its file and line, and so
// is one of another format.
func TestRecordBadFile(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"berth-fencing 2\n", ":1: \"berth-fencing 2\", want \"berth-fencing 1\" first"},
		{"# c\n" + recordHeader + "\nrevision 7\ntoken a x\n", ":4: token of a \"x\""},
		{recordHeader + "\ntokens a 1\n", ":2: \"tokens a 1\": want"},
	} {
		path := filepath.Join(t.TempDir(), "fencing")
		if err := os.WriteFile(path, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenRecord(path)
		if err == nil || !strings.Contains(err.Error(), path+c.want) {
			t.Errorf("%q: %v, want %q", c.body, err, path+c.want)
		}
	}
}

// BenchmarkColdStart5000 is the record's cost at a cold start of 5,000
// jobs: their claims come in transactions of 127 (supervisor claimBatch),
// and each batch's tokens are written before its jobs start, one write
// of the whole record per batch (40 writes, the record growing to 5,000
// lines). It reports the bytes written per start.
func BenchmarkColdStart5000(b *testing.B) {
	const jobs, batch = 5000, 127
	for b.Loop() {
		b.StopTimer()
		path := RecordPath(b.TempDir())
		r := openT(b, path)
		written := 0
		write := r.write
		r.write = func(p string, data []byte, perm os.FileMode) error {
			written += len(data)
			return write(p, data, perm)
		}
		b.StartTimer()
		for start := 0; start < jobs; start += batch {
			var hs []Hand
			for i := start; i < min(start+batch, jobs); i++ {
				hs = append(hs, Hand{Job: fmt.Sprintf("orders-%d", i), Token: uint64(1000 + start)})
			}
			if err := errors.Join(r.Hand(hs)...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(written), "bytes/start")
	}
}

// BenchmarkRestart is one restart's token at 5,000 jobs: the whole record
// rewritten for one token.
func BenchmarkRestart(b *testing.B) {
	r := openT(b, RecordPath(b.TempDir()))
	var hs []Hand
	for i := range 5000 {
		hs = append(hs, Hand{Job: fmt.Sprintf("orders-%d", i), Token: 1000})
	}
	if err := errors.Join(r.Hand(hs)...); err != nil {
		b.Fatal(err)
	}
	tok := uint64(1001)
	for b.Loop() {
		if err := r.Hand([]Hand{{Job: "orders-7", Token: tok}})[0]; err != nil {
			b.Fatal(err)
		}
		tok++
	}
}
