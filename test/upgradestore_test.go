package test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berthd/berth/api"
	"github.com/berthd/berth/internal/testutil"
)

// upgradeAnswer is how long berth upgrade may take to answer when the
// hand-over is refused or cannot happen: 5 s (case C36,
// docs/live-restart.md "Upgrade by re-exec"). It is the product's rule,
// not a wait of the test's, so it is not stretched for a loaded host.
const upgradeAnswer = 5 * time.Second

// storeAgent starts one agent whose store link goes through a proxy the
// test cuts, with session_ttl ttl and one job, and returns it, the proxy
// and the job's run once it is running.
func storeAgent(t *testing.T, ttl time.Duration) (*agent, *testutil.Proxy, api.Job) {
	t.Helper()
	eps := externalEtcd(t)
	px := testutil.StartProxy(t, eps[0])
	a := newAgent(t, "a")
	a.configure(clusterSpec{name: clusterName(), endpoints: []string{px.Endpoint()}},
		staticTable([]string{"sleeper"}, nil)+sleeperConnector("sleeper", 0))
	// configure writes the tests' session_ttl; this one needs its own.
	b, err := os.ReadFile(a.config)
	if err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf("session_ttl = %q", sessionTTL.String())
	if !strings.Contains(string(b), old) {
		t.Fatalf("no %s in the agent's file:\n%s", old, b)
	}
	a.write(strings.Replace(string(b), old, fmt.Sprintf("session_ttl = %q", ttl.String()), 1))
	a.start()
	a.waitMember(settle)
	js := a.waitRunning("sleeper")
	return a, px, js["sleeper"]
}

// upgradeRun is one berth upgrade started by the test.
type upgradeRun struct {
	out    testutil.SyncBuffer
	err    error
	took   time.Duration
	exited chan struct{}
}

// startUpgrade runs berth upgrade for a with --timeout 60s and returns at
// once.
func startUpgrade(t *testing.T, a *agent) *upgradeRun {
	t.Helper()
	u := &upgradeRun{exited: make(chan struct{})}
	cmd := exec.Command(berthBin, "upgrade", "--config", a.config, "--timeout", "60s")
	cmd.Stdout, cmd.Stderr = &u.out, &u.out
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		u.err = cmd.Wait()
		u.took = time.Since(t0)
		close(u.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // one that exited: no error that matters
		<-u.exited
	})
	return u
}

// answered reports whether the upgrade has exited, waiting at most d.
func (u *upgradeRun) answered(d time.Duration) bool {
	select {
	case <-u.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// C36 beside a store that loses its session's renewals (the fencing
// soak's mixed round of an etcd leader kill and berth upgrade): the store
// link is cut just before berth upgrade, long enough for the agent's
// session to be lost (its local deadline, 2 s after a renewal with a 3 s
// TTL), then healed at once, while the lease still lives on the server.
// The hand-over must be refused within 5 s with the reason: the session
// was lost and the jobs fenced, so a new image would have nothing to
// adopt. (It used to wait for the store, take the answer that came after
// the heal as a renewal of the lost session, exec, and leave berth
// upgrade waiting its whole --timeout for an adoption never reported:
// "no hand-over seen".) Once the agent is a member again, an upgrade
// hands the job over.
func TestC36UpgradeRefusedWhenTheSessionIsLost(t *testing.T) {
	a, px, run := storeAgent(t, 3*time.Second)

	px.Partition(testutil.Stall)
	u := startUpgrade(t, a)
	testutil.Eventually(t, settle, "the agent fenced", func() bool {
		return strings.Contains(a.out.String(), "session lost: fencing")
	})
	px.Heal()
	if !u.answered(testutil.Deadline(70 * time.Second)) {
		t.Fatalf("berth upgrade did not exit:\n%s", &u.out)
	}
	t.Logf("berth upgrade answered in %s: %v\n%s", u.took.Round(time.Millisecond), u.err, strings.TrimSpace(u.out.String()))
	if u.err == nil || !strings.Contains(u.out.String(), "refused the hand-over") || !strings.Contains(u.out.String(), "session") {
		t.Errorf("berth upgrade of a fenced agent: %v, want the refusal with its reason (the session):\n%s\nagent:\n%s", u.err, &u.out, a.out)
	}
	if u.took > upgradeAnswer {
		t.Errorf("berth upgrade answered in %s, more than %s", u.took.Round(time.Millisecond), upgradeAnswer)
	}
	if strings.Contains(a.out.String(), "handed_over_from") {
		t.Errorf("the agent handed over with its session lost:\n%s", a.out)
	}

	// The job starts again (a new run: it was fenced), and then a hand-over
	// keeps it.
	a.waitMember(settle)
	var js map[string]api.Job
	testutil.Eventually(t, settle, "the job runs again", func() bool {
		js = a.jobs()
		return js["sleeper"].State == "running" && js["sleeper"].PID != 0 && js["sleeper"].PID != run.PID
	})
	out, err := exec.Command(berthBin, "upgrade", "--config", a.config, "--timeout", "60s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1 of 1 runs adopted") {
		t.Fatalf("berth upgrade of the member again: %v\n%s", err, out)
	}
	if got := a.jobs()["sleeper"]; got.PID != js["sleeper"].PID {
		t.Errorf("sleeper: pid %d after the hand-over, %d before", got.PID, js["sleeper"].PID)
	}
}

// C36 beside a store that does not answer while the session still lives
// (a leader election that does not end, a cut link): the renewal before
// the exec is bounded, so berth upgrade says why within 5 s; the agent
// and its job go on (same pid: the cut is shorter than the session's
// deadline, 8 s after a renewal with a 10 s TTL), and hand over once the
// store is back. (The renewal used to wait out the hand-over's 10 s, and
// succeed as soon as the store answered, seconds after berth upgrade
// began.)
func TestC36UpgradeAnswersWhileTheStoreIsSilent(t *testing.T) {
	a, px, run := storeAgent(t, 10*time.Second)
	// Just after a renewal: the cut then leaves the most of the deadline.
	last := a.waitMember(settle).LastRenewal
	testutil.Eventually(t, settle, "a renewal", func() bool {
		i, err := a.info()
		return err == nil && i.LastRenewal != nil && last != nil && i.LastRenewal.After(*last)
	})

	px.Partition(testutil.Stall)
	u := startUpgrade(t, a)
	answered := u.answered(upgradeAnswer + time.Second)
	px.Heal()
	if !answered && !u.answered(testutil.Deadline(70*time.Second)) {
		t.Fatalf("berth upgrade did not exit:\n%s", &u.out)
	}
	t.Logf("berth upgrade answered in %s: %v\n%s", u.took.Round(time.Millisecond), u.err, strings.TrimSpace(u.out.String()))
	if u.err == nil || !strings.Contains(u.out.String(), "refused the hand-over") || !strings.Contains(u.out.String(), "did not answer") {
		t.Errorf("berth upgrade with the store silent: %v, want the refusal with its reason:\n%s", u.err, &u.out)
	}
	if u.took > upgradeAnswer {
		t.Errorf("berth upgrade answered in %s, more than %s", u.took.Round(time.Millisecond), upgradeAnswer)
	}
	if got := a.waitRunning("sleeper")["sleeper"]; got.PID != run.PID {
		t.Errorf("sleeper: pid %d after the refused hand-over, %d before", got.PID, run.PID)
	}

	a.waitMember(settle)
	out, err := exec.Command(berthBin, "upgrade", "--config", a.config, "--timeout", "60s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1 of 1 runs adopted") {
		t.Fatalf("berth upgrade once the store answers: %v\n%s", err, out)
	}
	if got := a.jobs()["sleeper"]; got.PID != run.PID {
		t.Errorf("sleeper: pid %d after the hand-over, %d before", got.PID, run.PID)
	}
}

// A hand-over from an agent whose only job runs no process (it ran and
// exited, restart = "never"): the lease guard holds no run, and the new
// image must still report its adoption (0 of 0) at its first reconcile.
// berth upgrade used to wait for an adoption never reported, its whole
// --timeout ("no hand-over seen"), as in the fencing soak when the jobs
// had been fenced before the exec.
func TestUpgradeWithNoRunHeld(t *testing.T) {
	e := newEnv(t)
	e.write(e.header("2s") + `
[cluster]
session_ttl = "30s"

[static]
connectors = ["once"]

[[connector]]
name = "once"
  [connector.run]
  command = ["true"]
  restart = "never"
`)
	e.start()
	testutil.Eventually(t, settle, "the job ran and exited", func() bool {
		j, ok := e.jobs()["once"]
		return ok && j.State == "exited"
	})
	t0 := time.Now()
	out, err := exec.Command(berthBin, "upgrade", "--config", e.config, "--timeout", "20s").CombinedOutput()
	took := time.Since(t0)
	t.Logf("berth upgrade answered in %s: %v\n%s", took.Round(time.Millisecond), err, strings.TrimSpace(string(out)))
	if err != nil || !strings.Contains(string(out), "0 of 0 runs adopted") {
		t.Fatalf("berth upgrade of an agent with no run: %v, want 0 of 0 runs adopted:\n%s\n%s", err, out, e.out)
	}
	if !strings.Contains(e.out.String(), "handed_over_from") {
		t.Errorf("no hand-over in the agent's log:\n%s", e.out)
	}
}
