package daemon

import (
	"os"
	"testing"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/worker"
)

// No test leaves a cgroup directory or cgroup-root lock file of its own
// behind.
func TestMain(m *testing.M) { os.Exit(testutil.CheckLeftBehind(m.Run())) }

// agentTestHost is the host facts the tests' files are checked against.
func agentTestHost() *config.Host { return worker.LocalHost() }
