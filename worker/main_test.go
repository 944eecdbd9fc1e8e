package worker

import (
	"os"
	"testing"

	"github.com/berthd/berth/internal/testutil"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every worker's
// steps run on the process-wide reaper, launcher threads and log readers,
// which are started here, before the goroutines are counted, and outlive
// every worker by design; so do the threads of the confined launcher pool,
// started by the first job that runs as another user. It also checks that
// no test left a cgroup directory or lock file of its own behind.
func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	if err := Prepare(); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/berthd/berth/worker.launcher"),
		// No test leaves a cgroup of its own behind.
		goleak.Cleanup(func(code int) { os.Exit(testutil.CheckLeftBehind(code)) }))
}
