package test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

// startWrapped runs the agent as `sh -c 'exec 7>>SECRET; exec flock -n LOCK
// berth agent'`: an agent whose caller holds two descriptors without
// close-on-exec, fd 7 on a root-only file and flock(1)'s lock. e.cmd is
// flock; the agent is its child, whose pid it returns.
func (e *env) startWrapped(secret, lock string) int {
	e.t.Helper()
	e.run(exec.Command("/bin/sh", "-c", `exec 7>>"$1"; exec flock -n "$2" "$3" agent --config "$4"`,
		"sh", secret, lock, berthBin, e.config))
	var ag api.Agent
	testutil.Eventually(e.t, 60*time.Second, "agent /v1/agent", func() bool {
		select {
		case err := <-e.waited:
			e.waited <- err
			e.t.Fatalf("agent exited early: %v\n%s", err, e.out)
		default:
		}
		return getJSONQuiet("http://"+e.addr+"/v1/agent", &ag) == http.StatusOK && ag.PID > 0
	})
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(ag.PID) + "/exe")
	if exe != berthBin {
		e.t.Fatalf("agent pid %d runs %q, want %s", ag.PID, exe, berthBin)
	}
	// Runs before e.cleanup (cleanups are last in, first out): killing
	// flock does not kill its child.
	e.t.Cleanup(func() {
		if testutil.Alive(ag.PID) {
			_ = syscall.Kill(ag.PID, syscall.SIGKILL)
		}
	})
	return ag.PID
}

// fds lists the descriptor numbers of pid, sorted; ok is false when pid is
// gone.
func fds(pid int) ([]int, bool) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return nil, false
	}
	var out []int
	for _, en := range ents {
		if n, err := strconv.Atoi(en.Name()); err == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, true
}

// C25 (jdx/pitchfork#886): an agent started by a wrapper that holds
// descriptors without close-on-exec (fd 7 on a root-only 0600 file, and
// flock(1)'s lock) passes none of them to a job: every job process holds
// fds 0, 1 and 2 only, a job running as nobody writes nothing into the
// file through fd 7, every descriptor of the agent itself is
// close-on-exec, and after an agent SIGKILL an orphaned job process does
// not keep the wrapper's lock.
func TestC25JobsGetOnlyStandardDescriptors(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("needs flock(1) (util-linux)")
	}
	e := newEnv(t)
	secret := filepath.Join(e.dir, "secret")
	if err := os.WriteFile(secret, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(e.dir, "wrapper.lock")
	e.write(e.header("1s") + `
[[connector]]
name = "sleeper"
  [connector.run]
  command = ["/bin/sh", "-c", "sleep 1000 & wait"]

[[connector]]
name = "writer"
  [connector.run]
  user = "nobody"
  command = ["/bin/sh", "-c", "echo leaked >&7; echo tried; exec sleep 1000"]
`)
	agentPID := e.startWrapped(secret, lock)
	e.waitRunning("sleeper", "writer")
	testutil.Eventually(t, 30*time.Second, "the writer tried fd 7", func() bool {
		b, _ := os.ReadFile(filepath.Join(e.dir, "log", "writer.log"))
		return strings.Contains(string(b), "tried")
	})
	// sh and its sleep, and the writer's sleep.
	testutil.Eventually(t, 30*time.Second, "3 job processes", func() bool { return len(procsUnderAll(e)) >= 3 })
	// Both sleeps in their own nanosleep: a process counted may still be
	// in its dynamic loader, which holds each library it maps open for a
	// moment.
	testutil.Eventually(t, 30*time.Second, "both sleeps loaded and sleeping", func() bool {
		n := 0
		for _, pid := range uniq(procsUnderAll(e)) {
			if inNanosleep(pid) {
				n++
			}
		}
		return n == 2
	})

	for _, pid := range uniq(procsUnderAll(e)) {
		got, ok := fds(pid)
		if ok && !slices.Equal(got, []int{0, 1, 2}) {
			cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			t.Errorf("job process %d (%q) holds descriptors %v, want [0 1 2]", pid, strings.ReplaceAll(string(cmd), "\x00", " "), got)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || len(b) != 0 {
		t.Errorf("root-only file holds %q (%v), want nothing written by the nobody job", b, err)
	}
	if log, _ := os.ReadFile(filepath.Join(e.dir, "log", "writer.log")); !strings.Contains(string(log), "Bad file descriptor") {
		t.Errorf("writer's log does not show its write to fd 7 failing:\n%s", log)
	}

	// The agent's own descriptors, inherited and opened, are close-on-exec.
	agentFDs, _ := fds(agentPID)
	for _, fd := range agentFDs {
		if fd <= 2 {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(agentPID) + "/fdinfo/" + strconv.Itoa(fd))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
				if err == nil && flags&syscall.O_CLOEXEC == 0 {
					target, _ := os.Readlink("/proc/" + strconv.Itoa(agentPID) + "/fd/" + strconv.Itoa(fd))
					t.Errorf("agent descriptor %d (%s) is not close-on-exec (flags %s)", fd, target, strings.TrimSpace(v))
				}
			}
		}
	}
	if !strings.Contains(e.out.String(), "inherited descriptor kept from jobs") {
		t.Errorf("the agent did not log the descriptors it inherited:\n%s", e.out)
	}

	// The agent dies without cleaning up: its jobs' main processes get
	// their parent-death SIGKILL, the sleeper's child lives on as an orphan.
	if err := syscall.Kill(agentPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.waited: // flock saw its child die and exited
	case <-time.After(60 * time.Second):
		t.Fatalf("flock did not exit within 60s of the agent's SIGKILL")
	}
	orphans := uniq(procsUnderAll(e))
	if len(orphans) == 0 {
		t.Fatalf("no job process outlived the agent; the orphan this test needs is gone")
	}
	if out, err := exec.Command("flock", "-n", lock, "true").CombinedOutput(); err != nil {
		t.Errorf("flock -n %s while orphaned job processes %v run: %v %s (a job holds the wrapper's lock)", lock, orphans, err, out)
	}
}

// inNanosleep reports whether process pid is blocked in nanosleep(2) or
// clock_nanosleep(2) (/proc/PID/syscall, proc(5): the number of the
// syscall it is blocked in): sleep(1)'s own code runs, past the shell
// that exec'd it and any dynamic loader (whichever sleep the host has:
// coreutils', or busybox's on the cgroup v2 lane).
func inNanosleep(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/syscall")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return false
	}
	n, err := strconv.Atoi(f[0])
	return err == nil && (n == unix.SYS_CLOCK_NANOSLEEP || n == unix.SYS_NANOSLEEP)
}
