package handover

import (
	"os"
	"testing"

	"github.com/berthd/berth/internal/testutil"
)

// No test leaves a cgroup directory of its own behind.
func TestMain(m *testing.M) { os.Exit(testutil.CheckLeftBehind(m.Run())) }
