package worker

import (
	"cmp"
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	jobspec "github.com/berthd/berth/spec"
	"golang.org/x/sys/unix"
)

// flushers is a job whose main process waits for two children; each child
// traps TERM, flushes for 1 s, then writes its marker in dir and exits.
// The main process has no trap: TERM ends it at once.
func flushers(g *testGroup, dir string) Spec {
	child := func(n string) string {
		return `sh -c 'trap "sleep 1 && echo flushed > ` + filepath.Join(dir, n) + `; exit 0" TERM; while :; do sleep 0.1; done' &`
	}
	return sh(g, child("a")+"\n"+child("b")+"\nwait")
}

func markers(dir string) []string {
	var out []string
	for _, n := range []string{"a", "b"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// stopFlushers starts spec, waits until both children run, stops it and
// returns the log.
func stopFlushers(t *testing.T, spec Spec) string {
	t.Helper()
	var logs testutil.SyncBuffer
	spec.Log = &logs
	w := startWorker(t, spec)
	pid := waitRunning(t, w)
	testutil.Eventually(t, 30*time.Second, "both children and their loops", func() bool { return len(descendants(pid)) >= 4 })
	all := append([]int{pid}, descendants(pid)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Status(); st.State != Stopped {
		t.Errorf("state %s, want stopped", st.State)
	}
	for _, p := range all {
		if testutil.Alive(p) {
			t.Errorf("pid %d alive after Stop", p)
		}
	}
	if pids, err := spec.Group.Pids(); err != nil || len(pids) != 0 {
		t.Errorf("cgroup holds %v (%v) after Stop", pids, err)
	}
	return logs.String()
}

// kill_mode, as systemd's KillMode=: which processes the stop signal
// reaches, and what becomes of the others.
//
//   - control-group (the default): every process of the cgroup gets the
//     stop signal, and the stop waits for all of them, not only for the
//     main process: both children flush; no SIGKILL is needed;
//   - mixed: the stop signal to the main process only; once it has
//     exited, the rest of the cgroup is SIGKILLed at once: no child
//     flushes;
//   - process: the stop signal to the main process only; the others are
//     left alone (never signalled, so they never flush) until the grace is
//     over, then SIGKILLed: nothing outlives the stop.
func TestStopKillModes(t *testing.T) {
	for _, c := range []struct {
		mode    jobspec.KillMode
		grace   time.Duration
		flushed int      // children that got the signal and wrote their marker
		logs    []string // lines the job's log must hold
		noLogs  []string // and must not
	}{
		{"", time.Minute, 2, []string{"SIGTERM to every process of the cgroup"}, []string{"stop timeout"}},
		{jobspec.KillMixed, time.Minute, 0, []string{"SIGTERM to the main process (kill_mode mixed)"}, []string{"stop timeout"}},
		{jobspec.KillProcess, time.Second, 0, []string{"SIGTERM to the main process (kill_mode process)",
			"stop timeout after 1s: killing the processes left in the cgroup"}, nil},
	} {
		t.Run(cmp.Or(string(c.mode), "control-group"), func(t *testing.T) {
			g := newTestGroup(t, 0)
			dir := t.TempDir()
			spec := flushers(g, dir)
			spec.StopTimeout = c.grace
			spec.KillMode = c.mode
			log := stopFlushers(t, spec)
			if got := markers(dir); len(got) != c.flushed {
				t.Errorf("markers %v, want %d children flushed\n%s", got, c.flushed, log)
			}
			for _, l := range c.logs {
				if !strings.Contains(log, l) {
					t.Errorf("log lacks %q:\n%s", l, log)
				}
			}
			for _, l := range c.noLogs {
				if strings.Contains(log, l) {
					t.Errorf("log has %q:\n%s", l, log)
				}
			}
		})
	}
}

// kill_signal: the stop sends the configured signal; Retune changes the
// signal and the mode of the next stop.
func TestKillSignal(t *testing.T) {
	g := newTestGroup(t, 0)
	dir := t.TempDir()
	marker := filepath.Join(dir, "got")
	trap := func(sig string) string {
		return `trap "echo ` + sig + ` > ` + marker + `; exit 0" ` + sig + `; while :; do sleep 0.1; done`
	}
	for _, c := range []struct {
		name   string
		sig    unix.Signal
		retune bool
		mode   jobspec.KillMode
		trap   string
	}{
		{"SIGINT to the cgroup", unix.SIGINT, false, jobspec.KillControlGroup, "INT"},
		{"SIGUSR1 to the main process after Retune", unix.SIGUSR1, true, jobspec.KillMixed, "USR1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_ = os.Remove(marker)
			var logs testutil.SyncBuffer
			spec := sh(g, trap(c.trap))
			spec.StopTimeout = time.Minute
			spec.Log = &logs
			if !c.retune {
				spec.KillSignal, spec.KillMode = c.sig, c.mode
			}
			w := startWorker(t, spec)
			pid := waitRunning(t, w)
			testutil.Eventually(t, 30*time.Second, "the loop", func() bool { return len(descendants(pid)) > 0 })
			if c.retune {
				w.Retune(jobspec.RestartNever, time.Minute, c.mode, c.sig)
			}
			if err := w.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(marker)
			if err != nil || strings.TrimSpace(string(b)) != c.trap {
				t.Errorf("marker %q (%v), want %s trapped\n%s", b, err, c.trap, logs.String())
			}
			if e := w.Status().LastExit; e == nil || e.Code != 0 || e.Signal != "" {
				t.Errorf("last exit %+v, want a clean exit from the trap", e)
			}
			if !strings.Contains(logs.String(), unix.SignalName(c.sig)+" to ") {
				t.Errorf("log does not name %s:\n%s", unix.SignalName(c.sig), logs.String())
			}
		})
	}
}

// A stop signal the process that runs workers ignores (a shell starts its
// background jobs with SIGINT and SIGQUIT ignored, nohup ignores SIGHUP)
// reaches jobs started on a Runtime at its default: their shells can trap
// it. Here SIGHUP, which nothing else in this process catches.
func TestIgnoredStopSignalReachesJobs(t *testing.T) {
	signal.Ignore(syscall.SIGHUP)
	defer signal.Reset(syscall.SIGHUP)
	rt, err := StartRuntime()
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGroup(t, 0)
	marker := filepath.Join(t.TempDir(), "got")
	spec := sh(g, `trap "echo HUP > `+marker+`; exit 0" HUP; while :; do sleep 0.1; done`)
	spec.Runtime, spec.KillSignal, spec.KillMode, spec.StopTimeout = rt, unix.SIGHUP, jobspec.KillMixed, time.Minute
	w := New(spec)
	w.Start()
	pid := waitRunning(t, w)
	testutil.Eventually(t, 30*time.Second, "the loop", func() bool { return len(descendants(pid)) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(2*time.Minute))
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) != "HUP" {
		t.Fatalf("the job did not trap SIGHUP (%q, %v): it inherited the ignored signal", b, err)
	}
}
