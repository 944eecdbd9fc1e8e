package supervisor

import (
	"context"
	"maps"
	"sync"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/spec"
)

var _ source.Source = (*fakeSource)(nil)

// fakeSource is a Source whose assignment and claim answers the test sets:
// the seam for reconcile decisions. Everything below it (cgroups,
// processes) is real.
type fakeSource struct {
	changed chan struct{}
	lost    chan source.Loss

	mu       sync.Mutex
	desired  source.Desired
	claimErr error  // Claim fails with it while set
	holder   string // Claim finds the claim held by it while set
	relErr   error  // Release fails with it while set (counted all the same)
	claims   map[string]int
	releases map[string]int
	done     map[string]int // RestartDone calls per job
	doneErr  error          // RestartDone fails with it while set
	rev      int64
}

func newFakeSource() *fakeSource {
	return &fakeSource{changed: make(chan struct{}, 1), lost: make(chan source.Loss), claims: map[string]int{}, releases: map[string]int{}, done: map[string]int{}}
}

// assign makes the source want exactly the jobs of wl (generation +1).
func (f *fakeSource) assign(wl *spec.Workload) {
	f.mu.Lock()
	var ids []string
	for _, j := range wl.Jobs(0) {
		ids = append(ids, j.ID)
	}
	f.desired = source.Desired{Generation: f.desired.Generation + 1, Jobs: ids, Workload: wl,
		Targets: f.desired.Targets, Restarts: f.desired.Restarts}
	f.mu.Unlock()
	f.signal()
}

func (f *fakeSource) set(fn func(f *fakeSource)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeSource) count(m map[string]int, id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[id]
}

func (f *fakeSource) Desired() source.Desired {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.desired
}

func (f *fakeSource) Changed() <-chan struct{} { return f.changed }

func (f *fakeSource) claim(job string) (bool, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims[job]++
	switch {
	case f.claimErr != nil:
		return false, "", f.claimErr
	case f.holder != "":
		return false, f.holder, nil
	}
	return true, "sv", nil
}

func (f *fakeSource) ClaimMany(_ context.Context, jobs []string, renew func(string) bool) ([]cluster.Claimed, map[string]string, error) {
	var won []cluster.Claimed
	held := map[string]string{}
	for _, j := range jobs {
		ok, holder, err := f.claim(j)
		if err != nil {
			return won, held, err
		}
		if ok {
			f.mu.Lock()
			f.rev++
			c := cluster.Claimed{Job: j, Revision: f.rev, Created: f.rev, Seen: f.rev - 1}
			f.mu.Unlock()
			won = append(won, c)
		} else {
			held[j] = holder
		}
	}
	return won, held, nil
}

// RenewClaim hands out the next revision while the claim is ours.
func (f *fakeSource) RenewClaim(_ context.Context, job string) (cluster.Claimed, error) {
	ok, _, err := f.claim(job)
	if err != nil {
		return cluster.Claimed{}, err
	}
	if !ok {
		return cluster.Claimed{}, cluster.ErrClaimLost
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev++
	return cluster.Claimed{Job: job, Revision: f.rev, Seen: f.rev - 1}, nil
}

func (f *fakeSource) Release(_ context.Context, job string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases[job]++
	return f.relErr
}

// SetTarget keeps t in the fake store and signals Changed.
func (f *fakeSource) SetTarget(_ context.Context, connector string, t cluster.Target) error {
	f.mu.Lock()
	targets := map[string]cluster.Target{}
	maps.Copy(targets, f.desired.Targets)
	targets[connector] = t
	f.desired.Targets = targets
	f.mu.Unlock()
	f.signal()
	return nil
}

// RequestRestarts keeps a request per job, each with a new revision.
func (f *fakeSource) RequestRestarts(_ context.Context, connector string, jobs []string, onlyFailed bool, by string) error {
	f.mu.Lock()
	restarts := map[string]cluster.RestartRequest{}
	maps.Copy(restarts, f.desired.Restarts)
	for _, j := range jobs {
		f.rev++
		restarts[j] = cluster.RestartRequest{Connector: connector, Job: j, OnlyFailed: onlyFailed, By: by, Rev: f.rev}
	}
	f.desired.Restarts = restarts
	f.mu.Unlock()
	f.signal()
	return nil
}

// RestartDone removes r when it is still the job's request, and counts it.
func (f *fakeSource) RestartDone(_ context.Context, r cluster.RestartRequest) error {
	f.mu.Lock()
	f.done[r.Job]++
	if err := f.doneErr; err != nil {
		f.mu.Unlock()
		return err
	}
	if cur, ok := f.desired.Restarts[r.Job]; ok && cur.Rev == r.Rev {
		restarts := map[string]cluster.RestartRequest{}
		maps.Copy(restarts, f.desired.Restarts)
		delete(restarts, r.Job)
		f.desired.Restarts = restarts
	}
	f.mu.Unlock()
	f.signal()
	return nil
}

func (f *fakeSource) signal() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func (f *fakeSource) Lost() <-chan source.Loss { return f.lost }
