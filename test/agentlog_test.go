package test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// What the agent's own log says about a job's end: the cause first, at
// the level the event deserves.

// A fenced agent logs why (the session was lost) before it logs what
// happened to each job, and never calls fencing's kill a crash to restart.
func TestFencingLoggedCauseFirst(t *testing.T) {
	eps := embeddedEtcd(t)
	px := testutil.StartProxy(t, eps[0])
	a := newAgent(t, "a")
	a.configure(clusterSpec{name: clusterName(), endpoints: []string{px.Endpoint()}}, staticTable([]string{"f"}, nil)+`
[[connector]]
name = "f"
  [connector.run]
  command = ["sleep", "infinity"]
  restart = "always"
`)
	a.start()
	a.waitExactly(settle, "f")
	px.Partition(testutil.Stall)
	testutil.Eventually(t, settle, "fenced in the log", func() bool {
		return strings.Contains(a.out.String(), "fenced: every worker killed")
	})
	px.Heal()
	a.waitExactly(settle, "f")
	log := a.out.String()
	cause := strings.Index(log, "session lost: fencing")
	kill := strings.Index(log, `msg="job killed by fencing" job_id=f`)
	if cause < 0 || kill < 0 || kill < cause {
		t.Errorf("want the session-lost line before the job's kill line; cause at %d, kill at %d", cause, kill)
	}
	if strings.Contains(log, `msg="job exited; restarting" job_id=f`) {
		t.Error("fencing's kill was logged as a crash to restart")
	}
}

// A job that exits 0 with restart = "never" is logged at INFO; one that
// exits non-zero at ERROR; log_sink = "journal" on a host without journald
// is a warning at start.
func TestExitLogLevelsAndJournalWarning(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("1s") + `log_sink = "journal"

[static]

[[connector]]
name = "done"
  [connector.run]
  command = ["true"]
  restart = "never"

[[connector]]
name = "broken"
  [connector.run]
  command = ["/bin/sh", "-c", "exit 3"]
  restart = "never"
`)
	e.start()
	testutil.Eventually(t, 20*time.Second, "both exited", func() bool {
		js := e.jobs()
		return js["done"].State == "exited" && js["broken"].State == "exited"
	})
	log := e.out.String()
	for _, want := range []string{
		`level=INFO msg="job exited cleanly; its restart policy does not restart it" job_id=done`,
		`level=ERROR msg="job failed: it exited and its restart policy does not restart it" job_id=broken exit="exited 3"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("agent log lacks %s", want)
		}
	}
	if _, err := os.Stat("/run/systemd/journal/socket"); err == nil {
		t.Skip("this host has a journal: no warning expected")
	}
	if !strings.Contains(log, `level=WARN msg="log_sink = \"journal\" but this host has no journal`) {
		t.Error("no warning that log_sink = journal has no journal here")
	}
}
