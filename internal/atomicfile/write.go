package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, as os.WriteFile writes it but
// atomically: data goes to path+".tmp" (created with perm, or truncated),
// is synced to disk (fsync(2)) and renamed over path (rename(2) replaces
// a file atomically), and the directory is synced so that the rename
// itself survives a power loss (fsync(2): "Calling fsync() does not
// necessarily ensure that the entry in the directory containing the file
// has also reached disk"). A crash at any point leaves the old file or
// the new one. The temporary file is removed when a step fails. Errors
// name path: the temporary file cannot be created, written, synced or
// closed, the rename fails, or the directory cannot be synced.
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
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("write %s: sync its directory: %w", path, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: sync its directory: %w", path, err)
	}
	return nil
}
