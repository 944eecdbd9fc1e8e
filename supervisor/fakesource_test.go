package supervisor

import (
	"context"
	"errors"
	"sync"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/source"
)

// fakeSource is a Source whose assignment and claim answers the test sets:
// the seam for reconcile decisions. Everything below it (cgroups,
// processes) is real.
type fakeSource struct {
	changed chan struct{}

	mu       sync.Mutex
	desired  source.Desired
	env      source.Env
	claimErr error  // Claim fails with it while set
	holder   string // Claim finds the claim held by it while set
	claims   map[string]int
	releases map[string]int
	reloads  int
}

func newFakeSource() *fakeSource {
	return &fakeSource{changed: make(chan struct{}, 1), claims: map[string]int{}, releases: map[string]int{}}
}

// assign makes the source want exactly the jobs of wl (generation +1).
func (f *fakeSource) assign(wl *config.Workload) {
	f.mu.Lock()
	var ids []string
	owners := map[string]string{}
	for _, j := range wl.Jobs(0) {
		ids = append(ids, j.ID)
		owners[j.ID] = "sv"
	}
	f.desired = source.Desired{Generation: f.desired.Generation + 1, Jobs: ids, Owners: owners, Workload: wl}
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
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

func (f *fakeSource) Start(_ context.Context, env source.Env) error {
	f.set(func(f *fakeSource) { f.env = env })
	return nil
}

func (f *fakeSource) Desired() source.Desired {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.desired
}

func (f *fakeSource) Changed() <-chan struct{} { return f.changed }

func (f *fakeSource) Claim(_ context.Context, job string) (bool, string, error) {
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

func (f *fakeSource) Release(_ context.Context, job string) error {
	f.set(func(f *fakeSource) { f.releases[job]++ })
	return nil
}

func (f *fakeSource) Reload(context.Context, *config.Config) error {
	f.set(func(f *fakeSource) { f.reloads++ })
	return nil
}

func (f *fakeSource) Info() source.Info {
	f.mu.Lock()
	defer f.mu.Unlock()
	return source.Info{ID: "sv", State: source.Member, Leader: true, Generation: f.desired.Generation}
}

func (f *fakeSource) Members(context.Context) ([]cluster.MemberRecord, error) {
	return nil, errors.New("fake source: no members")
}

func (f *fakeSource) Published() cluster.Published { return cluster.Published{} }
func (f *fakeSource) Stopping()                    {}
func (f *fakeSource) Close()                       {}
