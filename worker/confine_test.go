package worker

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

// capsZero are the /proc/PID/status capability sets that must be empty
// for a job with a user.
var capsZero = []string{"CapBnd", "CapEff", "CapPrm", "CapAmb", "CapInh"}

// TestUserJobConfined: a job with `user` runs with no_new_privs, an empty
// capability bounding set (and no capability at all), and exactly its
// user's groups, as /proc/PID/status shows; a set-user-ID-root program it
// runs gives it nothing. A job without `user`, started after it, keeps the
// agent's privileges: the confinement is the user job's alone.
func TestUserJobConfined(t *testing.T) {
	g := newTestGroup(t, 0)
	spec := sh(g, "exec sleep 60")
	spec.User = "nobody"
	pid := waitRunning(t, startWorker(t, spec))
	field := func(pid int, key string) string {
		t.Helper()
		v, ok := procField(pid, key)
		if !ok {
			t.Fatalf("/proc/%d/status has no %s", pid, key)
		}
		return v
	}
	if v := field(pid, "NoNewPrivs"); v != "1" {
		t.Errorf("NoNewPrivs = %q, want 1", v)
	}
	for _, k := range capsZero {
		if v := field(pid, k); v != "0000000000000000" {
			t.Errorf("%s = %q, want 0000000000000000", k, v)
		}
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	want, err := u.GroupIds()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(field(pid, "Groups"))
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("Groups = %v, want nobody's own groups %v", got, want)
	}
	if uid := strings.Fields(field(pid, "Uid")); len(uid) != 4 || uid[0] != u.Uid || uid[1] != u.Uid || uid[2] != u.Uid {
		t.Errorf("Uid = %v, want %s for real, effective and saved", uid, u.Uid)
	}

	// A set-user-ID-root copy of id(1), in a directory nobody may search:
	// under no_new_privs the bit is ignored and the job stays nobody.
	dir, err := os.MkdirTemp("", "berth-confine-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// id(1) where the host has it: /usr/bin/id (coreutils), or busybox's
	// applet on the lane-1 guest (the copy keeps the name busybox runs by).
	idPath, err := exec.LookPath("id")
	if err != nil {
		t.Fatalf("no id(1) on this host: %v", err)
	}
	suid := filepath.Join(dir, "id")
	copyFile(t, idPath, suid)
	if err := os.Chmod(suid, 0o4755); err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	probe := sh(g, `echo "euid=$(`+suid+` -u)"`)
	probe.JobID, probe.User, probe.Log = "probe", "nobody", &logs
	w := startWorker(t, probe)
	waitState(t, w, Exited)
	testutil.Eventually(t, 10*time.Second, "the probe's output", func() bool { return strings.Contains(logs.String(), "euid=") })
	if !strings.Contains(logs.String(), "euid="+u.Uid+"\n") {
		t.Errorf("a set-user-ID-root program run by the job printed %q, want euid=%s (the bit ignored)", logs.String(), u.Uid)
	}

	// A job as the agent's own user, started after: not confined, it has
	// what the agent's unconfined threads have (this goroutine's thread:
	// the process's main thread may be a launcher thread, confined).
	root := sh(g, "exec sleep 60")
	root.JobID = "root"
	rpid := waitRunning(t, startWorker(t, root))
	self := threadStatus(t)
	wantOf := map[string]string{"NoNewPrivs": self["NoNewPrivs"], "CapBnd": self["CapBnd"]}
	if testRT.JobsInit() != 0 {
		// In a jobs namespace, but for CAP_SYS_ADMIN (jobsNamespace.join).
		n, _ := strconv.ParseUint(self["CapBnd"], 16, 64)
		wantOf["CapBnd"] = fmt.Sprintf("%016x", n&^(1<<unix.CAP_SYS_ADMIN))
	}
	for _, k := range []string{"NoNewPrivs", "CapBnd"} {
		if v := field(rpid, k); v != wantOf[k] {
			t.Errorf("a job without user: %s = %q, want the agent's %q", k, v, wantOf[k])
		}
	}
	if n, _ := strconv.ParseUint(self["CapBnd"], 16, 64); n == 0 || self["NoNewPrivs"] != "0" {
		t.Errorf("the test's own thread is confined (%v): the check of a job without user proves nothing", self)
	}
}

// threadStatus returns NoNewPrivs and CapBnd of the calling goroutine's
// OS thread (/proc/thread-self/status).
func threadStatus(t *testing.T) map[string]string {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "NoNewPrivs" || k == "CapBnd") {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
