package supervisor

import (
	"os"
	"testing"

	"github.com/berthd/berth/worker"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	// Every goroutine an agent starts is waited for when Run returns; the
	// ones left are process-wide by design: the worker package's reaper
	// and launcher, which outlive every worker (started here, before the
	// goroutines are counted), and the rotation library's per-file
	// goroutine, which does not end on Close (see jobLogs).
	if err := worker.Prepare(); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("gopkg.in/natefinch/lumberjack%2ev2.(*Logger).millRun"))
}
