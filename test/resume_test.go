package test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// An agent killed with SIGKILL and started again before its lease expires
// resumes its session: the same member record (its start time unchanged),
// the same lease and claims, no wait for the old lease to expire; a clean
// stop leaves nothing to resume, so the next start joins anew.
func TestRestartResumesTheSession(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[cluster]
session_ttl = "30s"

[static]
connectors = ["sleeper"]

[[connector]]
name = "sleeper"
  [connector.run]
  command = ["sleep", "1000"]
`)
	e.start()
	e.waitRunning("sleeper")
	members := func() []api.Member {
		var ms []api.Member
		testutil.Eventually(t, 30*time.Second, "GET /v1/members answers", func() bool {
			return getJSONQuiet("http://"+e.addr+"/v1/members", &ms) == 200 && len(ms) == 1
		})
		return ms
	}
	first := members()[0]

	if err := e.stop(syscall.SIGKILL); err == nil {
		t.Fatal("agent killed by SIGKILL reported success")
	}
	e.start()
	e.waitRunning("sleeper")
	if !strings.Contains(e.out.String(), `msg="joined the cluster" resumed=true`) {
		t.Fatalf("the second start did not resume the session; log:\n%s", e.out)
	}
	if strings.Contains(e.out.String(), "waiting for the previous session of this member ID to expire") {
		t.Errorf("the second start waited for its own lease:\n%s", e.out)
	}
	if again := members()[0]; !again.Started.Equal(first.Started) {
		t.Errorf("member record started %s, was %s: a new session, not the resumed one", again.Started, first.Started)
	}

	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	e.start()
	e.waitRunning("sleeper")
	if strings.Contains(e.out.String(), "resumed=true") {
		t.Errorf("a start after a clean stop resumed a session it had left:\n%s", e.out)
	}
	if again := members()[0]; again.Started.Equal(first.Started) {
		t.Errorf("after a clean stop the member record kept its start time %s: not a new session", first.Started)
	}
}
