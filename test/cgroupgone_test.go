package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// identityJob is one job whose main process is a sleep, restarted
// always, with a short session (the guard's deadline 2 s after a renewal
// at most).
func identityJob(name string) string { return identityJobTTL(name, "2s") }

// identityJobTTL is identityJob with a session of ttl.
func identityJobTTL(name, ttl string) string {
	return fmt.Sprintf(`
[cluster]
session_ttl = %q

[static]
connectors = [%q]

[[connector]]
name = %q
  [connector.run]
  command = ["sleep", "1000"]
  restart = "always"
`, ttl, name, name)
}

// inCgroup reports whether /proc/PID/cgroup names a cgroup2 cgroup
// under root (the "0::" line, there on a hybrid host as on a unified one).
func inCgroup(pid int, root string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return strings.HasPrefix(p, "/"+root+"/")
		}
	}
	return false
}

// C33: a job's process killed and its cgroup removed in every hierarchy
// from outside, within a second: the agent makes the cgroup again and
// restarts the job by its policy (restart = "always"), in that cgroup;
// the job is never failed.
func TestC33JobCgroupRemovedFromOutside(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + identityJob("solo") + `
    [connector.run.limits]
    pids = 50
`)
	e.start()
	pid := e.waitRunning("solo")["solo"].PID
	if got := e.jobLimit("solo", "pids.max"); got != "50" {
		t.Fatalf("pids.max %q before, want 50", got)
	}
	var had []string // the job's cgroup in every hierarchy berth uses
	for _, d := range testutil.Hierarchies() {
		if dir := filepath.Join(d, e.root, "jobs", "solo"); exists(dir) {
			had = append(had, dir)
		}
	}
	removed := false
	for try := 0; try < 5 && !removed; try++ {
		if try > 0 {
			// The restart came before the removal: again, with the
			// longer backoff of the next restart.
			pid = e.waitRunning("solo")["solo"].PID
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		deadline := time.Now().Add(testutil.Deadline(3 * time.Second))
		for time.Now().Before(deadline) {
			if j := e.jobs()["solo"]; j.State == "running" && j.PID != pid && j.PID != 0 {
				break // restarted in the cgroup first
			}
			if rmdirJob(e, "solo") {
				removed = true
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !removed {
		t.Fatal("the job's cgroup could not be removed from outside between its run's end and its restart")
	}
	var j struct {
		State string
		PID   int
	}
	testutil.Eventually(t, 60*time.Second, "the job restarted after its cgroup was removed", func() bool {
		got := e.jobs()["solo"]
		if got.State == "failed" {
			t.Fatalf("the job is failed after its cgroup was removed: %s", got.Reason)
		}
		j.State, j.PID = string(got.State), got.PID
		return got.State == "running" && got.PID != 0 && got.PID != pid
	})
	for _, dir := range had {
		if !exists(dir) {
			t.Errorf("the job's cgroup %s was not made again", dir)
		}
	}
	if got := e.jobLimit("solo", "pids.max"); got != "50" {
		t.Errorf("pids.max %q in the cgroup made again, want the job's 50", got)
	}
	if !inCgroup(j.PID, e.root+"/jobs/solo") {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(j.PID) + "/cgroup")
		t.Errorf("the restarted run (pid %d) is not in the job's cgroup:\n%s", j.PID, b)
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, e.out)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// rmdirJob removes the cgroup of job id in every hierarchy, its run
// leaves first; it reports whether none is left.
func rmdirJob(e *env, id string) bool {
	gone := true
	for _, d := range testutil.Hierarchies() {
		dir := filepath.Join(d, e.root, "jobs", id)
		entries, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			continue
		}
		for _, en := range entries {
			if en.IsDir() {
				_ = syscall.Rmdir(filepath.Join(dir, en.Name()))
			}
		}
		if err := syscall.Rmdir(dir); err != nil && !os.IsNotExist(err) {
			gone = false
		}
	}
	return gone
}
