package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// C27 (nomad#18217): a stop gives every process of the job the stop signal
// and the grace, not only the main process. Four jobs `bash -c 'child &
// child & wait'`, each child trapping the stop signal to flush for 1 s and
// then write its marker, are stopped by one reload that removes them:
//
//   - kill_mode control-group (the default) with stop_timeout 10s: both
//     children flush;
//   - kill_signal = "SIGUSR1": both children flush on SIGUSR1 (not
//     SIGINT: a non-interactive shell starts its background children with
//     SIGINT and SIGQUIT ignored, and they cannot trap them);
//   - kill_mode mixed: SIGTERM to the main process only, then SIGKILL to
//     the rest as soon as it has exited: no marker;
//   - kill_mode process: SIGTERM to the main process only, the children
//     left alone until stop_timeout (2s), then SIGKILL: no marker.
//
// Whatever the mode, no process of any job is left.
func TestC27StopSignalsEveryProcessOfTheJob(t *testing.T) {
	e := newEnv(t)
	child := filepath.Join(e.dir, "child.sh")
	// $1: the marker; $2: the signal trapped.
	if err := os.WriteFile(child, []byte(`#!/bin/bash
trap 'sleep 1 && echo flushed > "$1"; exit 0' "$2"
touch "$1.ready"
while :; do sleep 0.1; done
`), 0o755); err != nil {
		t.Fatal(err)
	}
	marks := filepath.Join(e.dir, "marks")
	if err := os.Mkdir(marks, 0o755); err != nil {
		t.Fatal(err)
	}
	job := func(name, sig, extra string) string {
		a, b := filepath.Join(marks, name+".a"), filepath.Join(marks, name+".b")
		return fmt.Sprintf(`
[[connector]]
name = %q
  [connector.run]
  command = ["/bin/bash", "-c", "%s %s %s & %s %s %s & wait"]
%s`, name, child, a, sig, child, b, sig, extra)
	}
	jobs := job("flush", "TERM", "") +
		job("usr1", "USR1", "  kill_signal = \"SIGUSR1\"\n") +
		job("mixed", "TERM", "  kill_mode = \"mixed\"\n") +
		job("process", "TERM", "  kill_mode = \"process\"\n  stop_timeout = \"2s\"\n")
	e.write(e.header("10s") + jobs)
	e.start()
	e.waitRunning("flush", "usr1", "mixed", "process")
	names := []string{"flush", "usr1", "mixed", "process"}
	testutil.Eventually(t, 60*time.Second, "every child's trap installed", func() bool {
		for _, n := range names {
			for _, c := range []string{".a", ".b"} {
				if _, err := os.Stat(filepath.Join(marks, n+c+".ready")); err != nil {
					return false
				}
			}
		}
		return true
	})

	// One reload removes the four jobs: each is stopped by its own rules.
	e.write(e.header("10s"))
	if err := e.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "every job stopped and its cgroup removed", func() bool {
		return len(e.jobs()) == 0 && len(procsUnderAll(e)) == 0
	})
	written := func(n string) (got []string) {
		for _, c := range []string{".a", ".b"} {
			if b, err := os.ReadFile(filepath.Join(marks, n+c)); err == nil && strings.TrimSpace(string(b)) == "flushed" {
				got = append(got, c)
			}
		}
		return got
	}
	for _, n := range []string{"flush", "usr1"} {
		if got := written(n); len(got) != 2 {
			t.Errorf("job %s: markers %v written, want both children flushed", n, got)
		}
	}
	for _, n := range []string{"mixed", "process"} {
		if got := written(n); len(got) != 0 {
			t.Errorf("job %s: markers %v written, want none (its children are never signalled, only killed)", n, got)
		}
	}
	logOf := func(n string) string {
		b, _ := os.ReadFile(filepath.Join(e.dir, "log", n+".log"))
		return string(b)
	}
	for n, want := range map[string][]string{
		"flush":   {"SIGTERM to every process of the cgroup", "grace 10s"},
		"usr1":    {"SIGUSR1 to every process of the cgroup"},
		"mixed":   {"SIGTERM to the main process (kill_mode mixed)"},
		"process": {"SIGTERM to the main process (kill_mode process), grace 2s", "stop timeout after 2s: killing the processes left in the cgroup"},
	} {
		for _, w := range want {
			if !strings.Contains(logOf(n), w) {
				t.Errorf("job %s's log lacks %q:\n%s", n, w, logOf(n))
			}
		}
	}
	if !strings.Contains(logOf("flush"), "exited pid") || strings.Contains(logOf("flush"), "stop timeout") {
		t.Errorf("job flush: want its stop to end when its cgroup emptied, before the grace:\n%s", logOf("flush"))
	}
}
