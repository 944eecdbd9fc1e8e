package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Backoff between rmdir attempts while the kernel says a cgroup is busy.
const (
	deleteBackoffMin = 5 * time.Millisecond
	deleteBackoffMax = 200 * time.Millisecond
)

// Delete removes the group, and every cgroup below it, from every hierarchy:
// each v1 controller in use and the cgroup2 one. Children are removed before
// parents. An rmdir that fails with EBUSY (processes not yet gone, or the
// kernel still releasing the css) is retried with backoff until ctx ends.
// Delete runs in the caller's goroutine and leaves nothing running when it
// returns.
//
// Afterwards it checks that the directory is gone from each hierarchy (unlike
// libcgroup's cgdelete, which removed only the first controller's) and
// reports the ones that are not. Deleting a group that does not exist is not
// an error. Delete does not kill: call Kill first.
//
// Errors: naming every directory that is still there, wrapping the last
// rmdir error and ctx.Err() when ctx ended.
func (g *Group) Delete(ctx context.Context) error {
	return g.h.deleteRel(ctx, g.rel)
}

func (h *Hierarchy) deleteRel(ctx context.Context, rel string) error {
	var errs []error
	for _, dir := range h.dirs(rel) {
		if err := removeTree(ctx, dir); err != nil {
			errs = append(errs, err)
		}
	}
	var left []string
	for _, dir := range h.dirs(rel) {
		if _, err := os.Lstat(dir); err == nil {
			left = append(left, dir)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("delete cgroup %s: still present in %s: %w", rel, strings.Join(left, ", "), errors.Join(errs...))
	}
	return nil
}

// removeTree removes the cgroup directory dir and every cgroup below it,
// deepest first. cgroup directories hold only kernel files, which rmdir
// ignores, so rmdir is the whole removal (os.RemoveAll would try to unlink
// the control files).
func removeTree(ctx context.Context, dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("walk cgroup %s: %w", dir, err)
	}
	slices.Reverse(dirs) // WalkDir is pre-order: reversed, children come first
	for _, d := range dirs {
		if err := rmdirRetry(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// rmdirRetry removes one empty cgroup directory, retrying EBUSY with
// exponential backoff until ctx ends.
func rmdirRetry(ctx context.Context, dir string) error {
	backoff := deleteBackoffMin
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EAGAIN) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("remove cgroup %s: %w (last error: %w)", dir, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, deleteBackoffMax)
	}
}

// Remove deletes the hierarchy's root cgroup, and everything below it, from
// every hierarchy: the agent calls it when it stops, so that it leaves no
// cgroup behind. The root of a delegated hierarchy (OpenDelegated, or Open
// of "") belongs to systemd and is left alone, as are its `agent` leaf and
// anything outside `jobs`: only `jobs` is removed there.
//
// Errors: a directory is still busy (a process left in it) when ctx ends;
// the error names every directory that remains.
func (h *Hierarchy) Remove(ctx context.Context) error {
	if h.delegated {
		var errs []error
		for _, sub := range Subtrees() {
			errs = append(errs, h.deleteRel(ctx, sub))
		}
		return errors.Join(errs...)
	}
	return h.deleteRel(ctx, "")
}
