package memwatch

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nobody is the unprivileged user the job runs as.
const nobody = 65534

// asNobody runs script with /bin/sh as nobody (no capabilities) with env
// added, and returns its standard error and error.
func asNobody(t *testing.T, env []string, script string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	return stderr.String(), err
}

// A job with `user` follows the protocol as a systemd service would: it
// opens $MEMORY_PRESSURE_WATCH for writing and writes the decoded
// $MEMORY_PRESSURE_WRITE. It may once the file is delegated to it, and the
// kernel takes the trigger from an unprivileged writer (a 2 s window);
// it refuses a 1 s window from the same writer, which is why Notify
// rounds the window.
func TestNotifyJobWritesItsTrigger(t *testing.T) {
	needPSI(t)
	h := testHierarchy(t)
	g := newJob(t, h, "notify", nil)
	tgt := TargetOf(g)
	env, err := Notify(tgt, Rule{Limit: 10, Duration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const follow = `printf %s "$MEMORY_PRESSURE_WRITE" | base64 -d 1<>"$MEMORY_PRESSURE_WATCH"`
	if stderr, err := asNobody(t, env, follow); err == nil || !strings.Contains(stderr, "denied") {
		t.Fatalf("trigger written by nobody before Delegate: %v, %q; want permission denied", err, stderr)
	}
	if err := Delegate(tgt, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(tgt.PressureFile, &st); err != nil || st.Uid != nobody || st.Gid != nobody {
		t.Fatalf("%s after Delegate: uid %d gid %d, %v", tgt.PressureFile, st.Uid, st.Gid, err)
	}
	if stderr, err := asNobody(t, env, follow); err != nil {
		t.Fatalf("trigger written by nobody after Delegate: %v: %s", err, stderr)
	}
	if _, err := asNobody(t, env, `printf 'some 100000 1000000\000' 1<>"$MEMORY_PRESSURE_WATCH"`); err == nil {
		t.Errorf("an unprivileged trigger with a 1 s window was accepted; the kernel's rule changed (Notify rounds to 2 s)")
	}
	if err := Delegate(Target{}, nobody, nobody); err == nil {
		t.Error("Delegate without a pressure file: no error")
	}
}
