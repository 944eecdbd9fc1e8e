package daemon

import (
	"os"
	"testing"

	"github.com/berthd/berth/host"
	"github.com/berthd/berth/internal/testutil"
)

// No test leaves a cgroup directory or cgroup-root lock file of its own
// behind.
func TestMain(m *testing.M) { os.Exit(testutil.CheckLeftBehind(m.Run())) }

// agentTestHost is the host facts the tests' files are checked against.
func agentTestHost() *host.Host { return host.Local() }
