package handover

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/berthd/berth/source"
)

// The session is saved, read back by the next run, and forgotten; a file
// that does not parse is no session.
func TestSessionFile(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := NewSessionFile(dir)
	if s := f.load(log); s != (source.SavedSession{}) {
		t.Fatalf("session %+v from an empty data_dir", s)
	}
	want := source.SavedSession{Member: "host-a", Lease: 0x694d9a3b5c1e2f07}
	if err := f.Save(want); err != nil {
		t.Fatal(err)
	}
	if got := NewSessionFile(dir).load(log); got != want {
		t.Errorf("session %+v, want %+v", got, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "session"))
	if err != nil || string(b) != `{"member":"host-a","lease":"694d9a3b5c1e2f07"}`+"\n" {
		t.Errorf("file %q (%v): the lease in hex, as etcdctl prints it", b, err)
	}
	f.Remove()
	if s := f.load(log); s != (source.SavedSession{}) {
		t.Errorf("session %+v after Remove", s)
	}
	for _, bad := range []string{"{", `{"member":"a","lease":"zz"}`, `{"member":"a","lease":"0"}`, `{"lease":"12"}`} {
		if err := os.WriteFile(filepath.Join(dir, "session"), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if s := f.load(log); s != (source.SavedSession{}) {
			t.Errorf("session %+v from %q, want none", s, bad)
		}
	}
}
