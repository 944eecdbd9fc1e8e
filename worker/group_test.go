package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/testutil"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// testGroup is a job cgroup made with the real cgroup package for one test.
type testGroup struct {
	*cgroup.Group
	name string // path below each hierarchy's mount: <root>/jobs/job
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// newTestGroup makes the cgroup berth-worker-test-<test>-<rand>/jobs/job,
// with memory (and memory+swap) limited to memBytes when > 0. Cleanup kills
// what is left in it and removes it and its root from every hierarchy.
func newTestGroup(t testing.TB, memBytes int64) *testGroup {
	t.Helper()
	res := &specs.LinuxResources{}
	if memBytes > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &memBytes, Swap: &memBytes}
	}
	return newTestGroupRes(t, res)
}

// newTestGroupRes is newTestGroup with the limits res.
func newTestGroupRes(t testing.TB, res *specs.LinuxResources) *testGroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if cgroup.DetectMode() == cgroup.Unavailable {
		t.Skip("no cgroup file system mounted")
	}
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	root := testutil.TrackCgroupRoot(t, fmt.Sprintf("berth-worker-test-%s-%s", name, hex.EncodeToString(b)))
	h, err := cgroup.Open(root)
	if err != nil {
		t.Fatalf("open cgroup hierarchy %s: %v", root, err)
	}
	if err := h.Prepare(); err != nil {
		t.Fatalf("prepare cgroup hierarchy %s: %v", root, err)
	}
	g, err := h.New("jobs/job", res)
	if err != nil {
		t.Fatalf("create cgroup %s/jobs/job: %v", root, err)
	}
	place := g.Placement()
	dirs := []string{place.UnifiedDir}
	for _, f := range place.ProcsFiles {
		dirs = append(dirs, filepath.Dir(f))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(10*time.Second))
		defer cancel()
		if err := g.Kill(ctx); err != nil {
			t.Errorf("cleanup kill: %v", err)
		}
		if err := g.Delete(ctx); err != nil {
			t.Errorf("cleanup delete: %v", err)
		}
		// The cgroup package keeps <root>/jobs, <root>/groups and <root>;
		// remove them too.
		for _, d := range dirs {
			if d == "" {
				continue
			}
			root := filepath.Dir(filepath.Dir(d))
			for _, up := range []string{filepath.Dir(d), filepath.Join(root, cgroup.GroupsDir), root} {
				if err := unix.Rmdir(up); err != nil && !errors.Is(err, unix.ENOENT) {
					t.Errorf("cleanup remove %s: %v", up, err)
				}
			}
		}
	})
	return &testGroup{Group: g, name: root + "/jobs/job"}
}
