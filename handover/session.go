package handover

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/berthd/berth/internal/atomicfile"
	"github.com/berthd/berth/source"
)

// SessionFile is <data_dir>/session: the member ID and lease of the
// agent's live session, so that the agent's next run (after a crash, an
// OOM kill, an upgrade) resumes that session (cluster.Client.Resume)
// instead of waiting for its lease to expire and joining anew: the same
// lease, member record and claims, so no other member starts anything and
// the assignment's generation does not change. The source saves it when
// it joins or resumes and removes it when the session ends for good (the
// agent leaves, or the lease is lost): it is the source's
// source.SessionRecord.
type SessionFile struct {
	path string
}

var _ source.SessionRecord = (*SessionFile)(nil)

// savedSession is the file's content.
type savedSession struct {
	Member string `json:"member"`
	Lease  string `json:"lease"` // hex, as etcdctl prints lease IDs
}

// NewSessionFile is the session file of dataDir.
func NewSessionFile(dataDir string) *SessionFile {
	return &SessionFile{path: filepath.Join(dataDir, "session")}
}

// load returns the saved session; zero when there is none or the file
// does not parse (logged: the agent joins anew).
func (f *SessionFile) load(log *slog.Logger) source.SavedSession {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return source.SavedSession{}
	}
	var s savedSession
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	var lease int64
	if err == nil {
		lease, err = strconv.ParseInt(s.Lease, 16, 64)
	}
	if err != nil || lease == 0 || s.Member == "" {
		log.Warn("the saved session does not parse: joining anew", "file", f.path, "error", err)
		return source.SavedSession{}
	}
	return source.SavedSession{Member: s.Member, Lease: lease}
}

// Save records s (atomicfile.WriteFile: a crash leaves the old file or the
// new). Errors: the file cannot be written.
func (f *SessionFile) Save(s source.SavedSession) error {
	b, err := json.Marshal(savedSession{Member: s.Member, Lease: strconv.FormatInt(s.Lease, 16)})
	if err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	if err := atomicfile.WriteFile(f.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	return nil
}

// Remove forgets the saved session.
func (f *SessionFile) Remove() { _ = os.Remove(f.path) }
