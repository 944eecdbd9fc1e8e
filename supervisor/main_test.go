package supervisor

import (
	"os"
	"testing"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	// Every goroutine an agent starts is waited for when Run returns; the
	// ones left are process-wide by design: the worker package's reaper
	// and launcher and its log readers, which outlive every worker
	// (started here, before the goroutines are counted).
	if err := worker.Prepare(); err != nil {
		panic(err)
	}
	// No test leaves a cgroup directory or cgroup-root lock file of its
	// own behind.
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(),
		goleak.Cleanup(func(code int) { os.Exit(testutil.CheckLeftBehind(code)) }))
}
