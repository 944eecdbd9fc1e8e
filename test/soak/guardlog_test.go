//go:build soak

package soak

import (
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// guardLog is the lease guard's log of an agent, <data_dir>/guard.log:
// the soaks read from it when the guard killed every job of an agent that
// did not come back.
type guardLog string

// guardLogOf is the guard's log for the agent whose data_dir is dataDir.
func guardLogOf(dataDir string) guardLog { return guardLog(filepath.Join(dataDir, "guard.log")) }

// lateRe finds how late after its deadline the lease guard killed.
var lateRe = regexp.MustCompile(`the fencing deadline passed.* late=(\S+)`)

// kills is how many times so far the guard logged that its deadline
// passed and it killed every job.
func (g guardLog) kills() int {
	b, err := os.ReadFile(string(g))
	if err != nil {
		return 0
	}
	return len(lateRe.FindAllSubmatch(b, -1))
}

// waitKill waits up to timeout for a kill after the first seen ones and
// returns how late after its own deadline (the agent's plus guardLag) the
// guard killed; ok is false when it logged none in time.
func (g guardLog) waitKill(seen int, timeout time.Duration) (late time.Duration, ok bool) {
	ok = testutil.Poll(timeout, func() bool {
		b, err := os.ReadFile(string(g))
		if err != nil {
			return false
		}
		m := lateRe.FindAllSubmatch(b, -1)
		if len(m) <= seen {
			return false
		}
		late, err = time.ParseDuration(string(m[len(m)-1][1]))
		return err == nil
	})
	return late, ok
}

// guardLag is how long after the agent's local fencing deadline (last
// renewal + TTL − max(1 s, TTL/5)) its guard kills: half that margin
// (daemon guardLag), so half a margin before the lease can expire.
func guardLag(ttl time.Duration) time.Duration { return max(time.Second, ttl/5) / 2 }
