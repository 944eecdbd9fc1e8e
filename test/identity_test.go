package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// refused runs the agent of e's file, which must exit with an error
// whose output holds every string of want, and returns that output.
func (e *env) refused(want ...string) string {
	e.t.Helper()
	e.launch()
	var err error
	select {
	case err = <-e.waited:
	case <-time.After(testutil.Deadline(60 * time.Second)):
		e.t.Fatalf("the agent did not refuse to start within 60 s\n%s", e.out)
	}
	out := e.out.String()
	if err == nil {
		e.t.Fatalf("the agent exited 0, want a refusal\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			e.t.Errorf("the refusal does not say %q:\n%s", w, out)
		}
	}
	return out
}

// waitGone waits until no process of pids is alive.
func waitGone(t *testing.T, what string, pids ...int) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, what, func() bool {
		return !slices.ContainsFunc(pids, testutil.Alive)
	})
}

// C31: an agent started with another cgroup_root on the data_dir whose
// guard still holds a run in the earlier root refuses to start, naming
// both roots and what to do, and touches nothing: the run is not
// started twice. Started with the earlier root it adopts the run; once
// stopped cleanly, the new root is taken, the job runs there (the API's
// cgroup is the process's own) and a clean stop exits 0. (A session of
// 30 s: the way back adopts the run before the guard's deadline, on a
// loaded machine too.)
func TestC31NewCgroupRootOnSameDataDir(t *testing.T) {
	e := newEnv(t)
	rootA := e.root
	rootB := testutil.TrackCgroupRoot(t, rootA+"-b")
	e.write(e.header("2s") + identityJobTTL("solo", "30s"))
	e.start()
	first := e.waitRunning("solo")["solo"]
	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}

	e.root = rootB
	e.write(e.header("2s") + identityJobTTL("solo", "30s"))
	out := e.refused(fmt.Sprintf("serves cgroup_root %q", rootA), fmt.Sprintf("cgroup_root %q", rootB), filepath.Join(e.dir, "data"))
	t.Logf("refusal: %s", lastLine(out))
	if !testutil.Alive(first.PID) {
		t.Fatalf("the run (pid %d) was killed by a refused start", first.PID)
	}
	for _, d := range testutil.Hierarchies() {
		if exists(filepath.Join(d, rootB)) {
			t.Fatalf("the new root %s was made in %s by a refused start", rootB, d)
		}
	}

	// The way back the refusal names: the earlier root adopts the run.
	e.root = rootA
	e.write(e.header("2s") + identityJobTTL("solo", "30s"))
	e.start()
	if got := e.waitRunning("solo")["solo"]; got.PID != first.PID {
		t.Fatalf("started again with cgroup_root %q: pid %d, want the run %d adopted", rootA, got.PID, first.PID)
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, e.out)
	}
	waitGone(t, "the run ends with the clean stop", first.PID)

	// Then the new root is the job's.
	e.root = rootB
	e.write(e.header("2s") + identityJobTTL("solo", "30s"))
	e.start()
	j := e.waitRunning("solo")["solo"]
	if !inCgroup(j.PID, rootB) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(j.PID) + "/cgroup")
		t.Errorf("the run (pid %d) is not under %s:\n%s", j.PID, rootB, b)
	}
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(j.PID) + "/cgroup")
	if !strings.Contains(string(b), j.Cgroup) || !strings.HasPrefix(j.Cgroup, "/"+rootB+"/") {
		t.Errorf("the API says cgroup %q, the process is in:\n%s", j.Cgroup, b)
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, e.out)
	}
}

// lastLine is the last line of s.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// C32: agent A (data_dir d1, cgroup_root r) SIGKILLed with a job; agent
// B (data_dir d2, the same r) refuses to start while A's guard holds r,
// naming both data_dirs, and touches nothing of A's; once A's guard has
// killed its job at its deadline and exited, B starts, and nothing of
// A's kills or removes B's job or cgroups. While B runs, a third agent
// on r is refused naming B's data_dir; and B's data_dir edited in its
// file, then berth upgrade, is refused before the exec: B goes on with
// the same pid and its job.
func TestC32SecondDataDirOnSameCgroupRoot(t *testing.T) {
	a := newEnv(t)
	a.write(a.header("2s") + identityJob("ja"))
	a.start()
	ja := a.jobProcs0("ja")
	guardA := a.guardPids()
	if len(guardA) != 1 {
		t.Fatalf("guard processes of A: %v, want one", guardA)
	}
	if err := a.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}

	b := newEnv(t)
	b.root = a.root
	b.write(b.header("2s") + identityJob("jb"))
	out := b.refused("cgroup_root", a.root, filepath.Join(a.dir, "data"), filepath.Join(b.dir, "data"))
	t.Logf("refusal: %s", lastLine(out))

	// A's guard kills its own job at its deadline and exits; then B
	// may take the root.
	waitGone(t, "A's guard kills A's job at its deadline and exits", append(ja, guardA...)...)
	b.start()
	jb := b.waitRunning("jb")["jb"]
	guardB := b.guardPids()
	// Longer than A's session (2 s) several times over: nothing kills B's job.
	settle := time.Now().Add(testutil.Deadline(6 * time.Second))
	for time.Now().Before(settle) {
		if !testutil.Alive(jb.PID) {
			t.Fatalf("B's job (pid %d) was killed", jb.PID)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := b.jobs()["jb"]; got.State != "running" || got.PID != jb.PID {
		t.Fatalf("B's job: %+v, want running with pid %d", got, jb.PID)
	}

	// A third agent on r while B runs.
	c := newEnv(t)
	c.root = a.root
	c.write(c.header("2s") + identityJob("jc"))
	c.refused(fmt.Sprintf("cgroup_root %q", a.root), filepath.Join(b.dir, "data"))

	// B's data_dir edited, then berth upgrade: refused before the exec.
	pid := b.cmd.Process.Pid
	other := filepath.Join(b.dir, "data-edited")
	b.write(strings.Replace(b.header("2s"), filepath.Join(b.dir, "data"), other, 1) + identityJob("jb"))
	up := exec.Command(berthBin, "upgrade", "--config", b.config, "--timeout", "15s")
	upOut, err := up.CombinedOutput()
	if err == nil {
		t.Fatalf("berth upgrade after data_dir was edited succeeded:\n%s", upOut)
	}
	t.Logf("berth upgrade: %v: %s", err, lastLine(string(upOut)))
	// The agent itself refuses too, however it is asked (SIGUSR2).
	if err := b.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the agent logs the refused hand-over", func() bool {
		return strings.Contains(b.out.String(), "hand-over refused") && strings.Contains(b.out.String(), other)
	})
	if b.cmd.ProcessState != nil {
		t.Fatalf("the agent exited after the refused upgrade:\n%s", b.out)
	}
	var ag struct {
		PID int `json:"pid"`
	}
	getJSON(t, "http://"+b.addr+"/v1/agent", &ag)
	if ag.PID != pid {
		t.Errorf("agent pid %d after the refused upgrade, want %d", ag.PID, pid)
	}
	if got := b.jobs()["jb"]; got.State != "running" || got.PID != jb.PID {
		t.Errorf("B's job after the refused upgrade: %+v, want running with pid %d", got, jb.PID)
	}
	if _, err := os.Stat(other); err == nil {
		t.Errorf("the edited data_dir %s was made by a refused hand-over", other)
	}
	if err := b.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, b.out)
	}
	waitGone(t, "B's job and guard end with its clean stop", append([]int{jb.PID}, guardB...)...)
}

// jobProcs0 waits until job id runs and returns its main pid, as a list.
func (e *env) jobProcs0(id string) []int {
	e.t.Helper()
	return []int{e.waitRunning(id)[id].PID}
}
