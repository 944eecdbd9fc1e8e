package worker

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// LogConfig is a job's size-rotated log file, <log_dir>/<job_id>.log.
type LogConfig struct {
	// Path of the live log file; rotated files sit beside it with a UTC
	// time stamp in their name, <name>-2006-01-02T15-04-05.000<ext> (the
	// naming of the lumberjack library, which earlier versions used, so
	// that their rotated files are pruned too).
	Path string
	// MaxBytes is the size in bytes at which the file is rotated, rounded
	// up to a multiple of 1 MiB; 0 means 100 MiB.
	MaxBytes int64
	// MaxFiles is the number of rotated files kept besides the live one;
	// 0 means 5.
	MaxFiles int
}

const (
	// defaultMaxFiles is LogConfig.MaxFiles when 0.
	defaultMaxFiles = 5
	// defaultMaxBytes is LogConfig.MaxBytes when 0.
	defaultMaxBytes = 100 << 20
	// backupTimeFormat stamps a rotated file's name (UTC).
	backupTimeFormat = "2006-01-02T15-04-05.000"
)

// Open returns the rotating writer of c; the file is opened (created with
// mode 0600, or appended to) on first write, and rotated before a write
// that would take it past MaxBytes: renamed with a time stamp, a new file
// opened, and the oldest rotated files beyond MaxFiles removed. It keeps
// no goroutine and reads the directory only when it rotates. At most
// maxOpenLogs (256) such files are open in the process at once: the one
// written least recently is closed to open another, and opened again
// (appending) at its next write, so that a host of jobs that seldom write
// holds no descriptor per job. Writes and Close are safe for concurrent
// use; a Write after Close opens the file again.
func (c LogConfig) Open() io.WriteCloser {
	const mib = 1 << 20
	if c.MaxBytes <= 0 {
		c.MaxBytes = defaultMaxBytes
	}
	c.MaxBytes = (c.MaxBytes + mib - 1) / mib * mib
	if c.MaxFiles <= 0 {
		c.MaxFiles = defaultMaxFiles
	}
	return &rotatingFile{cfg: c}
}

// rotatingFile is LogConfig.Open's writer.
type rotatingFile struct {
	cfg  LogConfig
	mu   sync.Mutex
	f    *os.File // nil until the first write, after Close and once evicted
	size int64
	// elem is the file's place in openLogs while f is open (openLogs.mu).
	elem *list.Element
}

// maxOpenLogs bounds the rotating log files open at once in the process
// (openLogs).
const maxOpenLogs = 256

// openLogs is the process's open rotating log files, the most recently
// written first: past its bound, the least recently written is closed.
var openLogs = &logCache{max: maxOpenLogs, lru: list.New()}

// logCache keeps at most max rotating files open.
type logCache struct {
	mu  sync.Mutex
	max int
	lru *list.List // of *rotatingFile, front: written last
}

// touch records a write of r, whose file is open; r.mu is held.
func (c *logCache) touch(r *rotatingFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.elem != nil {
		c.lru.MoveToFront(r.elem)
		return
	}
	r.elem = c.lru.PushFront(r)
	// Close the least recently written beyond the bound. One whose lock
	// is taken (written or closed right now) is passed over: r.mu is held
	// here, so waiting for another file's lock could deadlock.
	for e := c.lru.Back(); c.lru.Len() > c.max && e != nil; {
		prev := e.Prev()
		o := e.Value.(*rotatingFile)
		if o != r && o.mu.TryLock() {
			c.lru.Remove(e)
			o.elem = nil
			if o.f != nil {
				_ = o.f.Close()
				o.f = nil
			}
			o.mu.Unlock()
		}
		e = prev
	}
}

// drop forgets r, whose file is being closed; r.mu is held.
func (c *logCache) drop(r *rotatingFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.elem != nil {
		c.lru.Remove(r.elem)
		r.elem = nil
	}
}

// Write implements io.Writer. A p longer than MaxBytes is written whole
// to a fresh file. Errors: the file cannot be opened, rotated or written.
func (r *rotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		if err := r.open(); err != nil {
			return 0, err
		}
	}
	if r.size > 0 && r.size+int64(len(p)) > r.cfg.MaxBytes {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	openLogs.touch(r)
	n, err := r.f.Write(p)
	r.size += int64(n)
	if err != nil {
		return n, fmt.Errorf("write log %s: %w", r.cfg.Path, err)
	}
	return n, nil
}

// Close implements io.Closer.
func (r *rotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	openLogs.drop(r)
	err := r.f.Close()
	r.f = nil
	return err
}

// open appends to the live file, creating it and its directory if needed.
func (r *rotatingFile) open() error {
	if err := os.MkdirAll(filepath.Dir(r.cfg.Path), 0o755); err != nil {
		return fmt.Errorf("open log %s: %w", r.cfg.Path, err)
	}
	f, err := os.OpenFile(r.cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open log %s: %w", r.cfg.Path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open log %s: %w", r.cfg.Path, err)
	}
	r.f, r.size = f, fi.Size()
	return nil
}

// rotate renames the live file with a time stamp, opens a new one with the
// same mode, and prunes the rotated files beyond MaxFiles.
func (r *rotatingFile) rotate() error {
	mode := os.FileMode(0o600)
	if fi, err := r.f.Stat(); err == nil {
		mode = fi.Mode().Perm()
	}
	openLogs.drop(r)
	if err := r.f.Close(); err != nil {
		r.f = nil
		return fmt.Errorf("rotate log %s: %w", r.cfg.Path, err)
	}
	r.f = nil
	dir, name := filepath.Split(r.cfg.Path)
	ext := filepath.Ext(name)
	prefix := strings.TrimSuffix(name, ext) + "-"
	// Two rotations within a millisecond would take one name: the later
	// one takes the next free millisecond.
	at := time.Now().UTC()
	backup := filepath.Join(dir, prefix+at.Format(backupTimeFormat)+ext)
	for i := 0; i < 1000; i++ {
		if _, err := os.Lstat(backup); errors.Is(err, fs.ErrNotExist) {
			break
		}
		at = at.Add(time.Millisecond)
		backup = filepath.Join(dir, prefix+at.Format(backupTimeFormat)+ext)
	}
	if err := os.Rename(r.cfg.Path, backup); err != nil {
		return fmt.Errorf("rotate log %s: %w", r.cfg.Path, err)
	}
	f, err := os.OpenFile(r.cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("rotate log %s: %w", r.cfg.Path, err)
	}
	r.f, r.size = f, 0
	r.prune(filepath.Clean(dir), prefix, ext)
	return nil
}

// prune removes the oldest rotated files of this log beyond MaxFiles; the
// time stamp in a name orders them. A file that cannot be removed is left.
func (r *rotatingFile) prune(dir, prefix, ext string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type backup struct {
		name string
		at   time.Time
	}
	var bs []backup
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(n, prefix) || !strings.HasSuffix(n, ext) {
			continue
		}
		at, err := time.Parse(backupTimeFormat, strings.TrimSuffix(strings.TrimPrefix(n, prefix), ext))
		if err != nil {
			continue // another job's log whose ID starts with this one's
		}
		bs = append(bs, backup{n, at})
	}
	slices.SortFunc(bs, func(a, b backup) int { return b.at.Compare(a.at) })
	for _, b := range bs[min(len(bs), r.cfg.MaxFiles):] {
		_ = os.Remove(filepath.Join(dir, b.name))
	}
}
