package worker

import (
	"os"
	"testing"

	"github.com/berthd/berth/internal/testutil"

	"go.uber.org/goleak"
)

// testRT is the Runtime of every worker the tests start; open while the
// tests run (runWithRuntime).
var testRT *Runtime

// runWithRuntime runs the tests with testRT open and closes it after the
// last one, before goleak counts the goroutines left: the reaper, the
// launcher threads and the log readers must all have returned.
type runWithRuntime struct{ m *testing.M }

func (r runWithRuntime) Run() int {
	var opts RuntimeOptions
	if os.Geteuid() == 0 {
		// As the lease guard runs jobs (a PID namespace needs
		// CAP_SYS_ADMIN); TestRuntimeWithoutNamespace and the other tests
		// that start a Runtime of their own run jobs without one.
		opts.JobsInit = testJobsInit()
	}
	rt, err := StartRuntimeWith(opts)
	if err != nil {
		panic(err)
	}
	testRT = rt
	code := r.m.Run()
	if err := rt.Close(); err != nil {
		os.Stderr.WriteString("worker runtime: " + err.Error() + "\n")
		code = 1
	}
	return code
}

// TestMain checks that no test leaves a goroutine behind, the worker
// runtime's included, and that no test left a cgroup directory or lock
// file of its own behind.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == JobsInitCommand {
		// This binary started as the init of a test Runtime's jobs
		// namespace (testJobsInit).
		if err := RunJobsInit(); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		os.Exit(runWithRuntime{m}.Run())
	}
	goleak.VerifyTestMain(runWithRuntime{m}, goleak.IgnoreCurrent(),
		goleak.Cleanup(func(code int) { os.Exit(testutil.CheckLeftBehind(code)) }))
}

// testJobsInit is the init command of a test Runtime's jobs namespace:
// this test binary, which TestMain turns into RunJobsInit.
func testJobsInit() []string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return []string{exe, JobsInitCommand}
}
