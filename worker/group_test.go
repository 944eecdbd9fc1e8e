package worker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"golang.org/x/sys/unix"
)

// testGroup is a job cgroup for these tests. It is the real cgroup package's
// Group when that is implemented; until then a small v1-only group written
// directly to /sys/fs/cgroup/<controller>/<name> (real cgroups, no mocks).
type testGroup struct {
	Group
	name string   // relative path under each hierarchy
	dirs []string // v1 directories, for the direct implementation
}

var v1Controllers = []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids"}

func randSuffix(t testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newTestGroup makes a unique cgroup for t, with memory limited to
// memBytes when > 0, removed in cleanup.
func newTestGroup(t testing.TB, memBytes int64) *testGroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	name := fmt.Sprintf("berth-worker-test-%s-%s", strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()), randSuffix(t))
	if g, ok := newRealGroup(t, name, memBytes); ok {
		return g
	}
	return newV1Group(t, name, memBytes)
}

func newV1Group(t testing.TB, name string, memBytes int64) *testGroup {
	t.Helper()
	g := &testGroup{name: name}
	g.Group = (*v1Group)(g)
	for _, c := range v1Controllers {
		root := filepath.Join("/sys/fs/cgroup", c)
		if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
			t.Skipf("v1 controller %s not mounted at %s: %v", c, root, err)
		}
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("create cgroup %s: %v", dir, err)
		}
		g.dirs = append(g.dirs, dir)
		if c == "cpuset" { // a v1 cpuset must have cpus and mems before it takes tasks
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(root, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0); err != nil {
					t.Fatalf("write %s: %v", f, err)
				}
			}
		}
		if c == "memory" && memBytes > 0 {
			for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(strconv.FormatInt(memBytes, 10)), 0); err != nil && f == "memory.limit_in_bytes" {
					t.Fatalf("write %s: %v", f, err)
				}
			}
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Kill(ctx); err != nil {
			t.Errorf("cleanup kill %s: %v", name, err)
		}
		for _, d := range g.dirs {
			for {
				err := unix.Rmdir(d)
				if err == nil || errors.Is(err, unix.ENOENT) {
					break
				}
				if !errors.Is(err, unix.EBUSY) || ctx.Err() != nil {
					t.Errorf("cleanup remove %s: %v", d, err)
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
	return g
}

// v1Group is the direct v1 implementation of Group for tests.
type v1Group testGroup

func (g *v1Group) Placement() cgroup.Placement {
	var p cgroup.Placement
	for _, d := range g.dirs {
		p.ProcsFiles = append(p.ProcsFiles, filepath.Join(d, "cgroup.procs"))
	}
	return p
}

func (g *v1Group) OOMKills() (uint64, error) {
	for _, d := range g.dirs {
		if filepath.Base(filepath.Dir(d)) != "memory" {
			continue
		}
		f, err := os.Open(filepath.Join(d, "memory.oom_control"))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "oom_kill" {
				return strconv.ParseUint(v, 10, 64)
			}
		}
		return 0, errors.New("no oom_kill in memory.oom_control")
	}
	return 0, errors.New("no memory controller")
}

func (g *v1Group) pids() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, d := range g.dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return nil, err
			}
			if !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out, nil
}

// Kill freezes the group, SIGKILLs every process, thaws, until empty.
func (g *v1Group) Kill(ctx context.Context) error {
	var freezer string
	for _, d := range g.dirs {
		if filepath.Base(filepath.Dir(d)) == "freezer" {
			freezer = filepath.Join(d, "freezer.state")
		}
	}
	for {
		pids, err := g.pids()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		_ = os.WriteFile(freezer, []byte("FROZEN"), 0)
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		_ = os.WriteFile(freezer, []byte("THAWED"), 0)
		select {
		case <-ctx.Done():
			return fmt.Errorf("kill cgroup %s: %w", g.name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
