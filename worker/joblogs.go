package worker

import (
	"io"
	"log/slog"
	"path"
	"sync"
)

// JobLogs holds one rotating log file per job, <dir>/<job_id>.log, for the
// agent's life: every worker the job ever has writes to the same one, so
// that its size (when to rotate) is known without a stat per write. The
// zero value is ready to use.
type JobLogs struct {
	mu    sync.Mutex
	files map[string]*logFile
}

// Writer returns job id's log writer, the file <dir>/<id>.log rotated at
// maxBytes bytes keeping maxFiles rotated files (LogConfig), and with
// journal the journal beside it (every line with BERTH_JOB_ID set: the
// agent's log_sink = "journal"). A write the file refuses (the directory
// full or gone) is reported on log, once per run of failures, and never
// stops the journal copy nor the job.
func (l *JobLogs) Writer(id, dir string, maxBytes int64, maxFiles int, journal bool, log *slog.Logger) io.Writer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.files == nil {
		l.files = map[string]*logFile{}
	}
	w, ok := l.files[id]
	if !ok {
		lc := LogConfig{Path: path.Join(dir, id+".log"), MaxBytes: maxBytes, MaxFiles: maxFiles}
		w = &logFile{file: lc.Open(), job: id, path: lc.Path, log: log}
		l.files[id] = w
	}
	if journal {
		return io.MultiWriter(w, &JournalWriter{JobID: id})
	}
	return w
}

// Release closes the job's log file when the agent no longer runs the job
// (stopped, moved, fenced): its descriptor is not held for nothing. The
// writer is kept, and opens the file again on its next write should the
// job come back.
func (l *JobLogs) Release(id string) {
	l.mu.Lock()
	w := l.files[id]
	l.mu.Unlock()
	if w != nil {
		w.mu.Lock()
		_ = w.file.Close()
		w.mu.Unlock()
	}
}

// CloseAll closes every job log file (at agent stop).
func (l *JobLogs) CloseAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, w := range l.files {
		_ = w.file.Close()
		delete(l.files, id)
	}
}

// logFile is one job's log file as the agent writes it: a write error is
// logged when a run of failures begins ("job log write failed", with the
// error) and when writes succeed again ("job log written again", with the
// bytes lost meanwhile), and is not returned — the output that could not
// be written is dropped, so that a full disk never blocks a job nor the
// journal copy of its output.
type logFile struct {
	file      io.WriteCloser
	job, path string
	log       *slog.Logger

	mu      sync.Mutex
	failing bool
	lost    int64 // bytes dropped since the run of failures began
}

// Write implements io.Writer; it always reports len(p) written.
func (f *logFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.file.Write(p)
	switch {
	case err != nil:
		if !f.failing {
			f.failing, f.lost = true, 0
			f.log.Error("job log write failed; the job runs on and its output is dropped until the file can be written again",
				"job_id", f.job, "file", f.path, "error", err)
		}
		f.lost += int64(len(p) - n)
	case f.failing:
		f.failing = false
		f.log.Info("job log written again", "job_id", f.job, "file", f.path, "bytes_lost", f.lost)
	}
	return len(p), nil
}
