package worker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"golang.org/x/sys/unix"
)

// setPidsMax writes v to pids.max of g in whichever hierarchy has the
// pids controller (v1 pids on a hybrid host, the unified one on pure v2).
func setPidsMax(t *testing.T, g *testGroup, v string) {
	t.Helper()
	for _, dir := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		f := filepath.Join(dir, g.name, "pids.max")
		if _, err := os.Stat(f); err != nil {
			continue
		}
		if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
			t.Fatalf("write %s to %s: %v", v, f, err)
		}
		return
	}
	t.Skip("no pids controller for the job's cgroup")
}

// A start that fails for a reason that passes (here the kernel refuses
// the fork: the job's cgroup is at its pids.max, EAGAIN) leaves the job
// backing off with the reason, not failed, and never said started; the
// launcher thread is back home; and the job starts once the reason is
// gone, though its restart policy is "never".
func TestTransientStartFailureIsRetried(t *testing.T) {
	g := newTestGroup(t, 0)
	setPidsMax(t, g, "0")
	var logs testutil.SyncBuffer
	spec := sh(g, "sleep 1000")
	spec.Log = &logs
	spec.Backoff = Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond}
	w := startWorker(t, spec)
	testutil.Eventually(t, 15*time.Second, "backoff after a refused fork", func() bool {
		st := w.Status()
		return st.State == BackingOff && strings.Contains(st.Reason, unix.EAGAIN.Error()) &&
			strings.Contains(st.Reason, "pids.max of the job's cgroup")
	})
	if strings.Contains(logs.String(), "berth: started") {
		t.Errorf("log says started:\n%s", logs.String())
	}
	checkThreadsHome(t)
	setPidsMax(t, g, "max")
	pid := waitRunning(t, w)
	if st := w.Status(); st.Reason != "" || st.PID != pid {
		t.Errorf("running with %+v, want no reason", st)
	}
}

// TransientStart takes the kernel's shortages and ErrStartTransient, and
// nothing a definition gets wrong.
func TestTransientStartClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("open tasks: %w", &os.PathError{Op: "open", Path: "tasks", Err: unix.EMFILE}), true},
		{fmt.Errorf("fork: %w", unix.EAGAIN), true},
		{unix.ENFILE, true},
		{unix.ENOMEM, true},
		{TransientStartError("process 7 died before exec: killed by SIGKILL"), true},
		{fmt.Errorf("x: %w", TransientStartError("y")), true},
		{&os.PathError{Op: "exec", Path: "/bin/nope", Err: unix.ENOENT}, false},
		{unix.EACCES, false},
		{errors.New("user nobody2: unknown user"), false},
	} {
		if got := TransientStart(c.err); got != c.want {
			t.Errorf("TransientStart(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
