//go:build soak

package soak

import (
	"os"
	"path/filepath"
	"syscall"

	"github.com/berthd/berth/internal/testutil"
)

// cgroupTree maps every cgroup directory at or below root, in every
// hierarchy, to its inode number. kernfs gives a directory made anew a new
// inode number, so an entry with the same path and inode as before is the
// same directory, never removed.
func cgroupTree(root string) map[string]uint64 {
	out := map[string]uint64{}
	for _, h := range testutil.Hierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			var st syscall.Stat_t
			if syscall.Stat(p, &st) == nil {
				out[p] = st.Ino
			}
			return nil
		})
	}
	return out
}
