package sampler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/recommend"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestMain(m *testing.M) {
	os.Exit(testutil.CheckLeftBehind(m.Run()))
}

// jobs is the agent's list of jobs as a test sets it, and the jobs the
// cluster defines.
type jobs struct {
	running []Job
	defined map[string]bool
	err     error
}

func (j *jobs) Running(buf []Job) []Job { return append(buf, j.running...) }

func (j *jobs) Defined(_ context.Context, ids []string) (map[string]bool, error) {
	if j.err != nil {
		return nil, j.err
	}
	out := map[string]bool{}
	for _, id := range ids {
		out[id] = j.defined[id]
	}
	return out, nil
}

// hierarchy opens a unique cgroup root, removed with everything in it by
// t.Cleanup.
func hierarchy(t testing.TB) *cgroup.Hierarchy {
	t.Helper()
	testutil.NeedRoot(t)
	if cgroup.DetectMode() == cgroup.Unavailable {
		t.Skip("no cgroup file system mounted")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	root := testutil.TrackCgroupRoot(t, "berth-test-sampler-"+hex.EncodeToString(b))
	h, err := cgroup.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Prepare(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.RemoveCgroupRoot(root) })
	return h
}

// busy runs in g a shell that holds 8 MiB for a moment (the block dd(1)
// reads /dev/zero into; busybox's tail does not keep a line without its
// end, GNU's does) and then loops, killed by t.Cleanup. It is held on a pipe
// until it is in g, so that what it charges is charged to g (v1 moves no
// charge with a process).
func busy(t *testing.T, g *cgroup.Group) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `read _ && exec /bin/sh -c "$0"`, "dd if=/dev/zero of=/dev/null bs=8388608 count=1 2>/dev/null; while :; do :; done")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	p := g.Placement()
	files := p.ProcsFiles
	if p.UnifiedDir != "" {
		files = append(files, filepath.Join(p.UnifiedDir, "cgroup.procs"))
	}
	for _, f := range files {
		if err := os.WriteFile(f, []byte(fmt.Sprint(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	_ = in.Close()
}

// A job's samples through the sampler: one CPU sample a tick (the first
// one only sets the counters), one memory sample every MemoryTicks ticks,
// the throttling of a busy loop under a quota counted; the history goes
// to the file when Run stops and comes back from it.
func TestSamplerFeedsTheModel(t *testing.T) {
	h := hierarchy(t)
	g, err := h.New("jobs/busy", &specs.LinuxResources{
		CPU:    &specs.LinuxCPU{Quota: new(int64(20000)), Period: new(uint64(100000))},
		Memory: &specs.LinuxMemory{Limit: new(int64(64 << 20))},
	})
	if err != nil {
		t.Fatal(err)
	}
	busy(t, g)
	m, err := recommend.New(recommend.DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), recommend.FileName)
	js := &jobs{running: []Job{{ID: "busy", Group: g}}, defined: map[string]bool{"busy": true}}
	s := New(Options{Model: m, Path: path, Jobs: js})
	// One tick for each tenth of a second of CPU time the loop is given
	// (at most 0.2 core: half a second between ticks at least).
	last := 0.0
	for range MemoryTicks + 1 {
		testutil.Eventually(t, 20*time.Second, "the busy loop uses CPU", func() bool {
			c, err := g.CPUCounters()
			return err == nil && c.UsageSeconds >= last+0.1
		})
		c, _ := g.CPUCounters()
		last = c.UsageSeconds
		s.sample()
	}
	r, ok := m.Recommend("busy", time.Now(), limits.Limits{CPU: 0.2}, recommend.Host{})
	if !ok {
		t.Fatal("no history of the busy job")
	}
	e := r.Evidence
	memTicks := uint64(0)
	for tick := uint64(1); tick <= MemoryTicks+1; tick++ {
		if (tick+phase("busy"))%MemoryTicks == 0 {
			memTicks++
		}
	}
	if e.CPUSamples != MemoryTicks || e.MemorySamples != memTicks {
		t.Errorf("%d CPU and %d memory samples after %d ticks; want %d and %d", e.CPUSamples, e.MemorySamples, MemoryTicks+1, MemoryTicks, memTicks)
	}
	// Throttled in some periods: how many depends on how much CPU the
	// host leaves the loop.
	if e.Periods == 0 || e.ThrottledPeriods == 0 || e.CPUMax <= 0 || e.MemoryPeak < 8<<20 {
		t.Errorf("evidence %+v: want a busy loop throttled at 0.2 core, and its 8 MiB peak", e)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	cancel()
	<-done
	m2, _ := recommend.New(recommend.DefaultParams())
	s2 := New(Options{Model: m2, Path: path, Jobs: js})
	s2.Load()
	r2, ok := m2.Recommend("busy", time.Now(), limits.Limits{CPU: 0.2}, recommend.Host{})
	if !ok || r2.Evidence.CPUSamples != e.CPUSamples || r2.Evidence.MemorySamples != e.MemorySamples {
		t.Errorf("after Run stopped and the file was read again: %+v, %v; want the samples of before", r2.Evidence, ok)
	}

	// A job that stops running gets a last memory sample from its
	// cgroup, then none; one whose cgroup is gone is skipped.
	if err := g.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	s2.sample()
	js.running = nil
	s2.sample()
	r3, _ := m2.Recommend("busy", time.Now(), limits.Limits{}, recommend.Host{})
	if r3.Evidence.MemorySamples < e.MemorySamples+1 {
		t.Errorf("%d memory samples after the job stopped, %d before: no last sample", r3.Evidence.MemorySamples, e.MemorySamples)
	}
	s2.sample()
	if err := g.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	js.running = []Job{{ID: "busy", Group: g}}
	s2.sample()
	if r4, _ := m2.Recommend("busy", time.Now(), limits.Limits{}, recommend.Host{}); r4.Evidence.CPUSamples != r3.Evidence.CPUSamples || r4.Evidence.MemorySamples != r3.Evidence.MemorySamples {
		t.Errorf("a deleted cgroup was sampled: %+v, then %+v", r3.Evidence, r4.Evidence)
	}
}

// A history file that cannot be read is set aside with a warning: the
// history starts empty.
func TestSamplerLoadsBadFileEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), recommend.FileName)
	if err := os.WriteFile(path, []byte("berth usage history\nnot really"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, _ := recommend.New(recommend.DefaultParams())
	var log strings.Builder
	s := New(Options{Model: m, Path: path, Jobs: &jobs{}, Log: newLogger(&log)})
	s.Load()
	if len(m.Jobs()) != 0 || !strings.Contains(log.String(), "usage history not read") {
		t.Errorf("jobs %v, log %q: want an empty history and a warning", m.Jobs(), log.String())
	}
}

// At each save the histories of jobs that are not running here and that
// the cluster no longer defines are dropped; those still defined (a
// paused connector, a job moved to another host) stay, and so does every
// one while the store cannot be read.
func TestSamplerForgetsUndefinedJobs(t *testing.T) {
	m, _ := recommend.New(recommend.DefaultParams())
	now := time.Now()
	for _, id := range []string{"deleted", "paused", "running"} {
		m.ObserveCPU(id, recommend.CPUSample{Time: now.Add(-time.Second)})
		m.ObserveCPU(id, recommend.CPUSample{Time: now, UsageSeconds: 0.5})
	}
	js := &jobs{running: []Job{{ID: "running"}}, defined: map[string]bool{"paused": true}, err: errors.New("store unreachable")}
	s := New(Options{Model: m, Path: filepath.Join(t.TempDir(), recommend.FileName), Jobs: js})
	s.maintain(now, true)
	if got := strings.Join(m.Jobs(), " "); got != "deleted paused running" {
		t.Errorf("with the store unreachable the histories are %q; want all three", got)
	}
	js.err = nil
	s.maintain(now, true)
	if got := strings.Join(m.Jobs(), " "); got != "paused running" {
		t.Errorf("histories %q; want paused and running (deleted dropped)", got)
	}
}

func newLogger(w *strings.Builder) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
