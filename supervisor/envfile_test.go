package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/worker"
)

// environ returns the value of name in /proc/pid/environ.
func environ(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// TestEnvFile: a job's env_file is read on this host when the job starts
// and at every reload. A file that group or others can read fails the job
// with the reason and takes no claim; once fixed, a reload starts the job
// with the file's values over its env. A changed file restarts the job at
// the next reload only; a file broken at a reload leaves the running job
// alone.
func TestEnvFile(t *testing.T) {
	fa := runFakeAgent(t)
	file := filepath.Join(t.TempDir(), "sec.env")
	write := func(body string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(file, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(file, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("SECRET=one\nSHARED=from-file\n", 0o644)
	wl := workloadOf(spec.Connector{Name: "sec", Run: &spec.Process{
		Command: []string{"/bin/sleep", "1000"}, Restart: spec.RestartNever,
		Env: map[string]string{"SHARED": "from-env", "PLAIN": "p"}, EnvFile: file,
	}})
	fa.src.assign(wl)
	j := fa.waitJob(t, "sec", "sec failed", func(j apiJobView) bool { return j.ok && j.State == worker.Failed })
	if !strings.Contains(j.Reason, "env_file "+file) || !strings.Contains(j.Reason, "chmod 0600") {
		t.Errorf("reason %q, want the env_file and its mode", j.Reason)
	}
	if n := fa.src.count(fa.src.claims, "sec"); n != 0 {
		t.Errorf("a job whose env_file is refused took its claim %d times", n)
	}
	if _, pending := fa.tbl.nextRetry(); pending {
		t.Error("a refused env_file armed a retry timer")
	}

	write("SECRET=one\nSHARED=from-file\n", 0o600)
	if err := fa.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := fa.waitJob(t, "sec", "sec running after the file was fixed", running)
	env := environ(t, first.PID)
	if env["SECRET"] != "one" || env["SHARED"] != "from-file" || env["PLAIN"] != "p" {
		t.Errorf("environment SECRET=%q SHARED=%q PLAIN=%q, want one, from-file (the file overrides env), p",
			env["SECRET"], env["SHARED"], env["PLAIN"])
	}

	// A changed file is read at the next reload, not before.
	write("SECRET=two\nSHARED=from-file\n", 0o600)
	fa.src.assign(wl)
	fa.waitJob(t, "sec", "sec still running", running)
	if j, _ := fa.Job("sec"); j.PID != first.PID {
		t.Fatalf("the job restarted (pid %d -> %d) without a reload", first.PID, j.PID)
	}
	if err := fa.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := fa.waitJob(t, "sec", "sec restarted by the reload", func(j apiJobView) bool { return running(j) && j.PID != first.PID })
	if got := environ(t, second.PID)["SECRET"]; got != "two" {
		t.Errorf("after reload SECRET=%q, want two", got)
	}

	// A file broken at a reload: the job keeps running, its values stay.
	write("SECRET=three\n", 0o644)
	if err := fa.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	fa.src.assign(wl)
	if err := fa.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if j, _ := fa.Job("sec"); j.State != worker.Running || j.PID != second.PID {
		t.Errorf("after a reload with a broken env_file: %s pid %d, want running pid %d", j.State, j.PID, second.PID)
	}
}
