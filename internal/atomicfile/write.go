package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, as os.WriteFile writes it but
// atomically: data goes to path+".tmp" (created with perm, or truncated),
// is synced to disk (fsync(2)) and renamed over path (rename(2) replaces
// a file atomically), so that a crash at any point leaves the old file or
// the new one; then the directory is synced, so that the rename too
// survives a power loss (fsync(2): syncing a file does not sync the entry
// naming it). The temporary file is removed when a step fails. Errors
// name path and the step that failed: the temporary file cannot be
// created, written, synced or closed, the rename fails, or the directory
// cannot be synced (the new content is in place then).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("write %s: sync its directory: %w", path, err)
	}
	return nil
}

// syncDir fsyncs directory dir.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
