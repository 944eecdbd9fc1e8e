package source

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// sessionFile is <data_dir>/session: the member ID and lease of the
// agent's live session, so that the agent's next run (after a crash, an
// OOM kill, an upgrade) resumes that session (cluster.Client.Resume)
// instead of waiting for its lease to expire and joining anew: the same
// lease, member record and claims, so no other member starts anything and
// the assignment's generation does not change. It is removed when the
// session ends for good (the agent leaves, or the lease is lost).
type sessionFile struct {
	path string
}

// savedSession is the file's content.
type savedSession struct {
	Member string `json:"member"`
	Lease  string `json:"lease"` // hex, as etcdctl prints lease IDs
}

func newSessionFile(dataDir string) sessionFile {
	return sessionFile{path: filepath.Join(dataDir, "session")}
}

// load returns the lease saved for member; false when there is none, it
// is another member's, or the file does not parse.
func (f sessionFile) load(member string) (int64, bool) {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return 0, false
	}
	var s savedSession
	if json.Unmarshal(b, &s) != nil || s.Member != member {
		return 0, false
	}
	lease, err := strconv.ParseInt(s.Lease, 16, 64)
	return lease, err == nil && lease != 0
}

// save records member's lease: written to a temporary file, synced and
// renamed over the old one, so a crash leaves the old file or the new.
func (f sessionFile) save(member string, lease int64) error {
	b, _ := json.Marshal(savedSession{Member: member, Lease: strconv.FormatInt(lease, 16)})
	tmp := f.path + ".tmp"
	w, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("save session %s: %w", f.path, err)
	}
	_, err = w.Write(append(b, '\n'))
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("save session %s: %w", f.path, err)
	}
	return nil
}

// remove forgets the saved session.
func (f sessionFile) remove() { _ = os.Remove(f.path) }
