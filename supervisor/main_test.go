package supervisor

import (
	"os"
	"testing"

	"github.com/berthd/berth/internal/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	// Every goroutine an agent starts is waited for when Run returns, the
	// worker runtime's (reaper, launcher threads, log readers) included.
	// No test leaves a cgroup directory or cgroup-root lock file of its
	// own behind.
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(),
		goleak.Cleanup(func(code int) { os.Exit(testutil.CheckLeftBehind(code)) }))
}
