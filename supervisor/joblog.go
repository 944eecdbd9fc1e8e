package supervisor

import (
	"io"
	"path"
	"sync"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/worker"
)

// jobLogs holds one rotating log file per job, <log_dir>/<job_id>.log, for
// the agent's life: every worker the job ever has writes to the same one,
// since the rotation library keeps a goroutine per writer even after Close
// and making a new one per worker would leak one at each restart.
type jobLogs struct {
	mu    sync.Mutex
	files map[string]io.WriteCloser
}

// writer returns the job's log writer, and with log_sink = "journal" the
// journal beside it (every line with BERTH_JOB_ID set).
func (l *jobLogs) writer(cfg *config.Config, id string) io.Writer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.files == nil {
		l.files = map[string]io.WriteCloser{}
	}
	w, ok := l.files[id]
	if !ok {
		w = worker.LogConfig{
			Path:     path.Join(cfg.Agent.LogDir, id+".log"),
			MaxBytes: cfg.Agent.LogMaxSize,
			MaxFiles: cfg.Agent.LogMaxFiles,
		}.Open()
		l.files[id] = w
	}
	if cfg.Agent.LogSink == "journal" {
		return io.MultiWriter(w, &worker.JournalWriter{JobID: id})
	}
	return w
}

// closeAll closes every job log file (at agent stop).
func (l *jobLogs) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, w := range l.files {
		_ = w.Close()
		delete(l.files, id)
	}
}
