package worker

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// newRealGroup makes the group <name>/jobs/job with the real cgroup
// package; ok is false while that package is still the contract stub.
func newRealGroup(t testing.TB, name string, memBytes int64) (*testGroup, bool) {
	t.Helper()
	h, err := cgroup.Open(name)
	if err != nil {
		if strings.Contains(err.Error(), "not implemented") {
			return nil, false
		}
		t.Fatalf("open cgroup hierarchy %s: %v", name, err)
	}
	if err := h.Prepare(); err != nil {
		t.Fatalf("prepare cgroup hierarchy %s: %v", name, err)
	}
	res := &specs.LinuxResources{}
	if memBytes > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &memBytes, Swap: &memBytes}
	}
	g, err := h.New("jobs/job", res)
	if err != nil {
		t.Fatalf("create cgroup %s/jobs/job: %v", name, err)
	}
	place := g.Placement()
	dirs := []string{place.UnifiedDir}
	for _, f := range place.ProcsFiles {
		dirs = append(dirs, filepath.Dir(f))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Kill(ctx); err != nil {
			t.Errorf("cleanup kill: %v", err)
		}
		if err := g.Delete(ctx); err != nil {
			t.Errorf("cleanup delete: %v", err)
		}
		for _, d := range dirs { // <root>/jobs and <root>, which the cgroup package keeps
			if d == "" {
				continue
			}
			for _, up := range []string{filepath.Dir(d), filepath.Dir(filepath.Dir(d))} {
				if err := unix.Rmdir(up); err != nil && !errors.Is(err, unix.ENOENT) {
					t.Errorf("cleanup remove %s: %v", up, err)
				}
			}
		}
	})
	return &testGroup{Group: g, name: name + "/jobs/job"}, true
}
