package testutil

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// LeftBehind names a tracked root's cgroup directories and lock file while
// they exist, and nothing once RemoveCgroupRoot has run.
func TestLeftBehindAndRemove(t *testing.T) {
	NeedRoot(t)
	hs := Hierarchies()
	if len(hs) == 0 {
		t.Skip("no cgroup hierarchy mounted")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	root := "berth-testutil-" + strings.ToLower(t.Name()) + "-" + hex.EncodeToString(b)
	var cleanups []func()
	TrackCgroupRoot(cleanupFunc(func(f func()) { cleanups = append(cleanups, f) }), root)
	t.Cleanup(func() { RemoveCgroupRoot(root) }) // should the checks below fail
	for _, h := range hs {
		if err := os.MkdirAll(filepath.Join(h, root, "jobs", "j"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(AgentLockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(CgroupLockFile(root), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := LeftBehind()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(hs[0], root)) || !strings.Contains(err.Error(), CgroupLockFile(root)) {
		t.Fatalf("LeftBehind = %v, want %s and %s named", err, filepath.Join(hs[0], root), CgroupLockFile(root))
	}
	if len(cleanups) != 1 {
		t.Fatalf("TrackCgroupRoot registered %d cleanups, want 1", len(cleanups))
	}
	cleanups[0]()
	if err := LeftBehind(); err != nil {
		t.Fatalf("after the cleanup: %v", err)
	}
}

// cleanupFunc is a Cleanup method over a function.
type cleanupFunc func(func())

func (c cleanupFunc) Cleanup(f func()) { c(f) }
