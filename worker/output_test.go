package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// Output gets its child's output and exit status while the reaper runs
// (a Runtime open), where os/exec's Wait would fail with ECHILD: the
// reaper's wait4(-1) would take the status first. A child that outlives
// ctx is killed.
func TestOutputBesideTheReaper(t *testing.T) {
	testutil.NeedRoot(t)
	rt, err := StartRuntime()
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(20*time.Second))
	defer cancel()
	for range 20 {
		out, err := Output(ctx, []string{"/bin/sh", "-c", "echo out; echo err >&2"})
		if err != nil || string(out) != "out\nerr\n" {
			t.Fatalf("Output: %q, %v; want \"out\\nerr\\n\" and no error", out, err)
		}
	}
	out, err := Output(ctx, []string{"/bin/sh", "-c", "echo refused; exit 3"})
	if err == nil || err.Error() != "exit status 3" || string(out) != "refused\n" {
		t.Errorf("Output of an exit 3: %q, %v", out, err)
	}
	if _, err := Output(ctx, []string{"/nonexistent/berth", "version"}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Output of a missing program: %v", err)
	}
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if _, err := Output(short, []string{"/bin/sleep", "60"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Output past its context: %v, want the deadline", err)
	}
}
