// Package sampler feeds an agent's usage history (package recommend)
// from its jobs' cgroups: one goroutine, on one ticker for every job,
// with no goroutine, timer or descriptor per job.
//
// Every second it reads each running job's CPU counters
// (cgroup.Group.CPUCounters: one file on cgroup v2, one or two on v1)
// and, every 15th second, its memory figures (cgroup.Group.MemorySample:
// four files, the v1 watermark reset) and pressure stalls
// (cgroup.Group.Pressure). Each job's memory second is set by its ID, so
// that the memory reads of many jobs spread over the 15 seconds instead
// of falling in one. CPU needs the one-second rate: a quota is enforced
// per CFS period, and usage averaged over 15 s hides the bursts a limit
// must cover (package recommend's documentation; BENCHMARKS.md). Memory
// does not: the kernel's watermark keeps the peak between two samples.
// A job that stops running gets a last memory sample at the next tick
// (its cgroup outlives its process), so that the peak of its last seconds
// is kept.
//
// Every minute, and when it stops, the sampler drops the histories of
// jobs gone from the host for a whole window (recommend.Model.Expire) and
// of jobs no longer defined in the cluster (a deleted connector, or tasks
// its connector no longer has), then writes the history file; a crash
// loses at most a minute of samples.
package sampler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/recommend"
)

const (
	// Tick is the time between two CPU samples of a job.
	Tick = time.Second
	// MemoryTicks is the number of ticks between two memory samples of a
	// job (15 s: within the model's 10 to 30 s).
	MemoryTicks = 15
	// SaveEvery is the time between two writes of the history file.
	SaveEvery = time.Minute
	// definedTimeout bounds the store read that finds the jobs no longer
	// defined.
	definedTimeout = 5 * time.Second
)

// Job is one running job to sample.
type Job struct {
	// ID is the job's ID.
	ID string
	// Group is its cgroup.
	Group *cgroup.Group
	// HighBytes is memory.high in force where the kernel enforces it
	// (cgroup v2), bytes; 0 when none or on v1.
	HighBytes uint64
}

// Jobs is the agent as the sampler sees it.
type Jobs interface {
	// Running appends the jobs running now (a process in their cgroup)
	// to buf, in ID order, and returns it.
	Running(buf []Job) []Job
	// Defined returns which of ids are the IDs of jobs still defined in
	// the cluster, on this host or another.
	//
	// Errors: the cluster's store cannot be read; no history is then
	// dropped.
	Defined(ctx context.Context, ids []string) (map[string]bool, error)
}

// Options configure a Sampler.
type Options struct {
	// Model is the history fed; Path its file (recommend.FileName in
	// data_dir).
	Model *recommend.Model
	Path  string
	// Jobs lists the jobs to sample.
	Jobs Jobs
	// Log receives the errors of reads and writes (each once until it
	// clears); nil: slog.Default().
	Log *slog.Logger
}

// Sampler takes every running job's samples into a Model. Run is its one
// goroutine; Save may be called from any other.
type Sampler struct {
	opts Options
	log  *slog.Logger
	tick uint64
	// jobs are the jobs of this tick, prev those of the one before.
	jobs, prev []Job
	// failed holds the jobs whose last read failed and was logged (a job
	// is logged again only after a read succeeded).
	failed map[string]bool
	// noPressure is set once the host proved to keep no pressure stall
	// information (cgroup.ErrNoPressure, logged once).
	noPressure bool
	// saveMu serialises Save (the history file is written through one
	// temporary file).
	saveMu sync.Mutex
}

// New returns a sampler for opts. It reads nothing.
func New(opts Options) *Sampler {
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return &Sampler{opts: opts, log: log, failed: map[string]bool{}}
}

// Model is the history the sampler feeds.
func (s *Sampler) Model() *recommend.Model { return s.opts.Model }

// Load reads the history file into the model: before the first job
// starts, so that the history of a job adopted or started again goes on
// from the file's. A file that cannot be read (recommend.ErrHistoryFile:
// another version, truncated, corrupt) is logged as a warning and the
// history starts empty; it is never fatal.
func (s *Sampler) Load() {
	if err := s.opts.Model.Load(s.opts.Path); err != nil {
		s.log.Warn("usage history not read: berth recommend starts afresh", "file", s.opts.Path, "error", err)
		return
	}
	if n := len(s.opts.Model.Jobs()); n > 0 {
		s.log.Info("usage history read", "file", s.opts.Path, "jobs", n)
	}
}

// Run samples every Tick until ctx is done, then saves the history
// (Save) and returns. The last save drops no history of a job no longer
// defined: the agent is stopping, and needs no store read for it.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(Tick)
	defer t.Stop()
	lastSave := time.Now()
	for {
		select {
		case <-ctx.Done():
			s.maintain(time.Now(), false)
			return
		case now := <-t.C:
			s.sample()
			if now.Sub(lastSave) >= SaveEvery {
				s.maintain(now, true)
				lastSave = now
			}
		}
	}
}

// sample takes one tick's samples: every running job's CPU counters, the
// memory figures of the jobs whose memory second this is, and those of
// the jobs that stopped running since the previous tick (a job's cgroup
// outlives its process until the job is stopped or started again, and
// its watermark holds the peak of its last seconds: a leak's highest).
func (s *Sampler) sample() {
	s.tick++
	s.jobs, s.prev = s.opts.Jobs.Running(s.prev[:0]), s.jobs
	s.sampleStopped()
	m := s.opts.Model
	for _, j := range s.jobs {
		c, err := j.Group.CPUCounters()
		if err != nil {
			s.readFailed(j.ID, "CPU", err)
			continue
		}
		m.ObserveCPU(j.ID, recommend.CPUSample{Time: time.Now(), UsageSeconds: c.UsageSeconds,
			Periods: c.Periods, ThrottledPeriods: c.ThrottledPeriods, QuotaCores: c.QuotaCores})
		if (s.tick+phase(j.ID))%MemoryTicks == 0 {
			s.sampleMemory(j)
		}
	}
}

// sampleStopped takes a last memory sample of each job of the previous
// tick that is not running now, or runs in another cgroup (both lists
// are in ID order).
func (s *Sampler) sampleStopped() {
	k := 0
	for _, p := range s.prev {
		for k < len(s.jobs) && s.jobs[k].ID < p.ID {
			k++
		}
		if k == len(s.jobs) || s.jobs[k].ID != p.ID || s.jobs[k].Group != p.Group {
			s.sampleMemory(p)
		}
	}
	clear(s.prev) // keep no group alive longer than needed
}

// sampleMemory takes j's memory sample.
func (s *Sampler) sampleMemory(j Job) {
	ms, err := j.Group.MemorySample()
	if err != nil {
		s.readFailed(j.ID, "memory", err)
		return
	}
	sample := recommend.MemorySample{Time: time.Now(), CurrentBytes: ms.CurrentBytes, PeakBytes: ms.PeakBytes,
		Peak: peakKind(ms.Peak), InactiveFileBytes: ms.InactiveFileBytes, HasInactiveFile: ms.HasInactiveFile,
		LimitBytes: ms.LimitBytes, HighBytes: j.HighBytes, OOMKills: ms.OOMKills}
	if !s.noPressure {
		switch p, err := j.Group.Pressure(); {
		case err == nil:
			sample.MemoryStallSeconds, sample.CPUStallSeconds, sample.HasPressure = p.Memory.SomeSeconds, p.CPU.SomeSeconds, true
		case errors.Is(err, cgroup.ErrNoPressure):
			s.noPressure = true
			s.log.Info("usage history without pressure stalls: the host keeps none", "reason", err)
		}
	}
	s.opts.Model.ObserveMemory(j.ID, sample)
}

// readFailed logs a failed read of job's cgroup once until a read
// succeeds; a cgroup gone (the job stopped since it was listed) is not
// logged.
func (s *Sampler) readFailed(job, what string, err error) {
	if errors.Is(err, cgroup.ErrNotExist) || s.failed[job] {
		return
	}
	s.failed[job] = true
	s.log.Warn("usage history: a sample could not be read", "job", job, "what", what, "error", err)
}

// maintain drops the histories of jobs gone and, with forget, of those
// no longer defined, and saves.
func (s *Sampler) maintain(now time.Time, forget bool) {
	m := s.opts.Model
	if gone := m.Expire(now); len(gone) > 0 {
		s.log.Info("usage history dropped: no sample for a whole window", "jobs", gone)
	}
	running := map[string]bool{}
	for _, j := range s.opts.Jobs.Running(nil) {
		running[j.ID] = true
	}
	for id := range s.failed {
		if !running[id] {
			delete(s.failed, id)
		}
	}
	if forget {
		s.forgetUndefined(running)
	}
	if err := s.Save(); err != nil {
		s.log.Warn("usage history not saved", "file", s.opts.Path, "error", err)
	}
}

// forgetUndefined drops the histories of the jobs not running here
// (running holds those that are) that the cluster no longer defines.
func (s *Sampler) forgetUndefined(running map[string]bool) {
	var idle []string
	for _, id := range s.opts.Model.Jobs() {
		if !running[id] {
			idle = append(idle, id)
		}
	}
	if len(idle) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), definedTimeout)
	defer cancel()
	defined, err := s.opts.Jobs.Defined(ctx, idle)
	if err != nil {
		return // the store is unreachable: keep every history until it answers
	}
	var gone []string
	for _, id := range idle {
		if !defined[id] {
			s.opts.Model.Forget(id)
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		s.log.Info("usage history dropped: no longer defined", "jobs", gone)
	}
}

// Save writes the history file now (recommend.Model.Save): at every
// SaveEvery, when Run returns, and before the agent hands its jobs over
// to a new program (berth upgrade).
//
// Errors: the file cannot be written.
func (s *Sampler) Save() error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	return s.opts.Model.Save(s.opts.Path)
}

// phase is job's memory second, 0 to MemoryTicks-1, set by its ID
// (FNV-1a, without allocating).
func phase(job string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(job); i++ {
		h = (h ^ uint64(job[i])) * 1099511628211
	}
	return h % MemoryTicks
}

// peakKind is w as the model takes it.
func peakKind(w cgroup.Watermark) recommend.PeakKind {
	switch w {
	case cgroup.WatermarkSinceLastSample:
		return recommend.PeakSinceLastSample
	case cgroup.WatermarkSinceCreation:
		return recommend.PeakSinceCreation
	}
	return recommend.PeakNone
}
