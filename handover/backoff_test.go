package handover

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/berthd/berth/worker"
)

// The restart waits are saved and read back beside the same guard (the
// due time through CLOCK_BOOTTIME), ignored beside another one, and
// removed by a clean stop.
func TestBackoffNotesFile(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	self := func() int { return os.Getpid() } // a process whose start time is known stands for the guard
	n, waits := loadNotes(dir, self, log)
	if len(waits) != 0 {
		t.Fatalf("waits %+v from an empty data_dir", waits)
	}
	due := time.Now().Add(time.Hour)
	exit := &worker.Exit{Code: 3, Reason: "exited 3"}
	n.Waiting(worker.Pending{JobID: "a", Fingerprint: "f", Restarts: 4, Delay: 8 * time.Second, NextRestart: due, LastExit: exit})
	n.Waiting(worker.Pending{JobID: "b", Fingerprint: "g", Restarts: 1, Delay: time.Second, NextRestart: due})
	n.Done("b")
	n.Close(false) // a crash: the file stays

	n2, waits := loadNotes(dir, self, log)
	if len(waits) != 1 {
		t.Fatalf("waits %+v, want a's", waits)
	}
	w := waits[0]
	if w.JobID != "a" || w.Fingerprint != "f" || w.Restarts != 4 || w.Delay != 8*time.Second || w.LastExit == nil || w.LastExit.Code != 3 {
		t.Errorf("wait %+v, want a's (4 restarts, 8 s, exit 3)", w)
	}
	// Saved as now + time left on CLOCK_BOOTTIME, read back the same way:
	// only the clock reads in between differ.
	if d := w.NextRestart.Sub(due).Abs(); d > time.Second {
		t.Errorf("due %v, saved %v", w.NextRestart, due)
	}
	n2.Close(false)

	other := func() int { return 1 } // another guard
	n3, waits := loadNotes(dir, other, log)
	if len(waits) != 0 {
		t.Errorf("waits %+v beside another guard, want none", waits)
	}
	n3.Close(true)
	if _, err := os.Stat(BackoffFile(dir)); !os.IsNotExist(err) {
		t.Errorf("a clean stop left %s: %v", BackoffFile(dir), err)
	}
}
