package supervisor

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/berthd/berth/internal/retry"
	"github.com/berthd/berth/supervisor/apply"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// An adopted run is taken over at once: the first pass loads its cgroup
// (cgroup.Hierarchy.Load: a few stat(2) calls), hands the run to its
// worker and reports it running. The limits the earlier agent wrote stay
// in force meanwhile, enforced by the kernel. Checking them against the
// definition (apply.New with adopted: each limit file read, one that
// differs written, a removed one lifted) is most of an adoption's cost,
// about 0.15 ms of CPU per job on cgroup v1, so it is done after the
// hand-over, beside the first scrapes, by settle (BENCHMARKS.md, "Live
// restart"). Until it is done, a limit changed in the definition while no
// agent ran is not yet in force: at 10,000 jobs, about a second.

// SettledLine is the message the agent logs once the limits of the jobs
// a pass adopted are checked and in force.
const SettledLine = "the limits of the adopted jobs are checked against their definitions"

// unsettled is an adopted job whose limits are still to be checked.
type unsettled struct {
	j   *job
	rel string
	res *specs.LinuxResources
}

// settler checks adopted jobs' limits after the pass that adopted them.
// The next pass waits for it (wait), so that no update of a job's limits
// meets a check of the same job.
type settler struct {
	mu      sync.Mutex
	pending []unsettled
	// done is closed when the checks started last are over (nil before
	// any): the loop then sets its retry timer for a refused one.
	done chan struct{}
	wg   sync.WaitGroup
}

// add queues u; startJob calls it for an adopted job whose cgroup it loaded.
func (s *settler) add(u unsettled) {
	s.mu.Lock()
	s.pending = append(s.pending, u)
	s.mu.Unlock()
}

// take returns the queued jobs and empties the queue.
func (s *settler) take() []unsettled {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pending
	s.pending = nil
	return p
}

// wait returns once every check started so far is done.
func (s *settler) wait() { s.wg.Wait() }

// doneC is closed when the checks started last are over; nil when none
// was started.
func (s *settler) doneC() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// settleAdopted starts checking the limits of the jobs startJobs adopted
// (settler.add), one per CPU at a time (it follows the report: more left
// the API answering late), in a goroutine the next pass
// and stopAll wait for (settler.wait), and returns at once. ctx ends it
// early: the jobs not yet checked keep the earlier agent's limits.
func (e *executor) settleAdopted(ctx context.Context) {
	us := e.settle.take()
	if len(us) == 0 {
		return
	}
	done := make(chan struct{})
	e.settle.mu.Lock()
	e.settle.done = done
	e.settle.mu.Unlock()
	e.settle.wg.Go(func() {
		defer close(done)
		began := time.Now()
		sem := make(chan struct{}, runtime.GOMAXPROCS(0))
		var wg sync.WaitGroup
		checked := 0
		for _, u := range us {
			if ctx.Err() != nil {
				break
			}
			sem <- struct{}{}
			checked++
			wg.Go(func() {
				defer func() { <-sem }()
				e.settleOne(u)
			})
		}
		wg.Wait()
		e.log.Info(SettledLine, "jobs", checked, "of", len(us), "after", time.Since(began).Round(time.Millisecond))
	})
}

// settleOne puts u's limits in force in its cgroup (apply.New with
// adopted). It holds fenceMu shared, as a start does, and does nothing
// once a fence began or the job left the table: its cgroup may be gone,
// and a check would make it again. When the kernel refuses a limit, the
// job keeps running with the earlier agent's limits and reports the
// refusal (job.refused: update_blocked, berth status), and the next pass,
// due with backoff, writes the definition's limits again (updateJob).
func (e *executor) settleOne(u unsettled) {
	e.fenceMu.RLock()
	defer e.fenceMu.RUnlock()
	if e.fencing.Load() || e.tbl.get(u.j.spec.ID) != u.j {
		return
	}
	if _, err := apply.New(e.hier, e.log, u.rel, u.res, true); err != nil {
		msg := fmt.Sprintf("the limits of the adopted run: %v", err)
		e.tbl.mu.Lock()
		u.j.res, u.j.refused = nil, msg // nil: the next updateJob writes them all
		e.tbl.retries.Failed(u.j.spec.ID, retry.Store(), e.clock.Now())
		e.tbl.mu.Unlock()
		e.log.Error("the kernel refused limits of an adopted job; it keeps the earlier agent's limits, and they are tried again at every reconcile",
			"job_id", u.j.spec.ID, "error", err)
	}
}
