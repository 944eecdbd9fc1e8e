package main

import (
	"fmt"
	"sync"
	"time"
)

// event is one start or stop of a job by a stand-in worker.
type event struct {
	job    string
	member string
	start  bool
	at     time.Time
}

// recorder is the stand-in workers' log: every member records "started"
// after its claim succeeded and "stopped" before it releases the claim (or
// when it is fenced or killed), in one order for the whole process. A job
// started while another member runs it is a double run: the claims failed.
type recorder struct {
	mu      sync.Mutex
	log     []event
	running map[string]string // job -> member that runs it now
	doubles []string          // double runs seen as they happened
	notes   []string          // the first errors members met, for the report
}

// note keeps the first 20 errors members met.
func (r *recorder) note(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.notes) < 20 {
		r.notes = append(r.notes, time.Now().Format("15:04:05.000")+" "+msg)
	}
}

func newRecorder() *recorder {
	return &recorder{running: map[string]string{}}
}

// started records that member started jobs.
func (r *recorder) started(member string, jobs []string) {
	now := time.Now()
	r.mu.Lock()
	for _, j := range jobs {
		r.log = append(r.log, event{job: j, member: member, start: true, at: now})
		if other, ok := r.running[j]; ok {
			r.doubles = append(r.doubles, fmt.Sprintf("%s started by %s while %s runs it", j, member, other))
		}
		r.running[j] = member
	}
	r.mu.Unlock()
}

// stopped records that member stopped jobs.
func (r *recorder) stopped(member string, jobs []string) {
	now := time.Now()
	r.mu.Lock()
	for _, j := range jobs {
		r.log = append(r.log, event{job: j, member: member, start: false, at: now})
		if r.running[j] == member {
			delete(r.running, j)
		}
	}
	r.mu.Unlock()
}

// count returns how many jobs run now.
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.running)
}

// holder returns the member that runs job now, "" for none.
func (r *recorder) holder(job string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[job]
}

// starts returns how many starts were recorded.
func (r *recorder) starts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.log {
		if e.start {
			n++
		}
	}
	return n
}

// check replays the log and returns every double run: a start of a job
// while another member's start of it has not been followed by its stop.
// It also returns the jobs that run at the end, by member.
func check(log []event) (doubles []string, running map[string]string) {
	running = map[string]string{}
	for _, e := range log {
		if e.start {
			if other, ok := running[e.job]; ok && other != e.member {
				doubles = append(doubles, fmt.Sprintf("%s started by %s at %s while %s runs it",
					e.job, e.member, e.at.Format(time.RFC3339Nano), other))
			}
			running[e.job] = e.member
			continue
		}
		if running[e.job] == e.member {
			delete(running, e.job)
		}
	}
	return doubles, running
}

// checkDoubles returns an error wrapping errDoubleRun, naming the first
// few, when a double run has been recorded so far; nil otherwise.
func (r *recorder) checkDoubles() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.doubles) == 0 {
		return nil
	}
	return fmt.Errorf("%d double runs (first: %s): %w", len(r.doubles), r.doubles[0], errDoubleRun)
}

// snapshot returns a copy of the log.
func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.log...)
}
