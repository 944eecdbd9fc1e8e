package cluster

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster/embedetcd"
	"github.com/berthd/berth/internal/testutil"
)

// externalEtcd is the server binary of Debian's etcd-server package
// (`apt-get install -y etcd-server`).
const externalEtcd = "/usr/bin/etcd"

// startExternalEtcd runs /usr/bin/etcd as a child on free loopback ports in
// a temporary directory, with extra flags, killed by PID in Cleanup.
func startExternalEtcd(t *testing.T, flags ...string) (*exec.Cmd, string) {
	t.Helper()
	if _, err := os.Stat(externalEtcd); err != nil {
		t.Skipf("%s not installed (apt-get install -y etcd-server): %v", externalEtcd, err)
	}
	dir := t.TempDir()
	client := "http://" + testutil.FreePort(t)
	peer := "http://" + testutil.FreePort(t)
	args := append([]string{
		"--name", "berth-test", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "berth-test=" + peer, "--log-level", "error"}, flags...)
	cmd := exec.Command(externalEtcd, args...)
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", externalEtcd, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("etcd log:\n%s", b)
		}
	})
	return cmd, client
}

// TestSessionFencesBeforeExternalEtcdExpires freezes a real etcd server
// (SIGSTOP): Done must fire before the earliest moment the server could
// expire the lease; after SIGCONT another client sees the member record go
// only after that.
func TestSessionFencesBeforeExternalEtcdExpires(t *testing.T) {
	cmd, url := startExternalEtcd(t)
	name := uniqueName(t)
	var c *Client
	testutil.Eventually(t, 15*time.Second, "external etcd answers", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		c, err = Connect(ctx, Config{Name: name, Endpoints: []string{url}, SessionTTL: testTTL})
		return err == nil
	})
	t.Cleanup(func() { c.Close() })
	s := join(t, c, assign.Member{ID: "a1"})
	testutil.Eventually(t, 2*testTTL, "a renewal", func() bool { return s.LastRenewal().After(s.Member().Started) })

	testutil.Stop(t, cmd.Process.Pid) // stopped, not only signalled: it answers nothing now
	<-s.Done()
	doneAt := time.Now()
	earliestExpiry := s.LastRenewal().Add(s.TTL())
	if !errors.Is(s.Err(), ErrSessionLost) {
		t.Fatalf("Err = %v, want ErrSessionLost", s.Err())
	}
	if !doneAt.Before(earliestExpiry) {
		t.Fatalf("Done at %s, not before the earliest server expiry %s", doneAt, earliestExpiry)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	observer := connect(t, []string{url}, name, nil)
	var goneAt time.Time
	testutil.Eventually(t, 3*testTTL, "member record expired", func() bool {
		ms, err := observer.Members(context.Background())
		if err != nil || len(ms) != 0 {
			return false
		}
		goneAt = time.Now()
		return true
	})
	if !goneAt.After(doneAt) {
		t.Fatalf("record gone at %s, before local fencing at %s", goneAt, doneAt)
	}
	t.Logf("server %s: fenced %s before earliest expiry", strings.TrimSpace(externalEtcd), earliestExpiry.Sub(doneAt))
}

func TestEmbeddedPersistsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	e, err := embedetcd.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(embedetcd.EndpointFile(dir))
	if err != nil || strings.TrimSpace(string(b)) != e.Endpoints()[0] {
		t.Fatalf("endpoint file = %q, %v; want %s", b, err, e.Endpoints()[0])
	}
	name := uniqueName(t)
	c := connect(t, e.Endpoints(), name, nil)
	if err := c.PutConnector(ctxT(t), "orders", []byte("tasks = 2")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	e.Close()
	if _, err := os.Stat(embedetcd.EndpointFile(dir)); !os.IsNotExist(err) {
		t.Fatalf("endpoint file left after Close: %v", err)
	}

	e2, err := embedetcd.Start(dir)
	if err != nil {
		t.Fatalf("restart on the same data directory: %v", err)
	}
	defer e2.Close()
	c2 := connect(t, e2.Endpoints(), name, nil)
	conns, err := c2.Connectors(ctxT(t))
	if err != nil || string(conns["orders"]) != "tasks = 2" {
		t.Fatalf("after restart Connectors = %q, %v", conns, err)
	}
}

func TestConnectRejectsBadConfig(t *testing.T) {
	ctx := ctxT(t)
	for _, cfg := range []Config{
		{}, // no endpoints
		{Name: "a/b", Endpoints: shared.Endpoints()},
		{Endpoints: shared.Endpoints(), SessionTTL: 1500 * time.Millisecond},
		{Endpoints: shared.Endpoints(), TLS: &TLSConfig{CA: "/nonexistent/ca.pem"}},
	} {
		if c, err := Connect(ctx, cfg); err == nil {
			c.Close()
			t.Errorf("Connect(%+v) accepted", cfg)
		}
	}
}

// TestRenewNowEndsWithTheSession freezes a real etcd server (SIGSTOP)
// while RenewNow (a hand-over's renewal before the exec) waits for it
// with a long context: RenewNow must end with the session, at its local
// deadline, with ErrSessionLost, not wait for the store and report a
// renewal of a lease whose workers are being fenced (the fencing soak's
// round of an etcd leader kill beside berth upgrade: the hand-over went
// on with a session already lost). Once the session has ended, RenewNow
// refuses at once, whatever the store answers.
func TestRenewNowEndsWithTheSession(t *testing.T) {
	cmd, url := startExternalEtcd(t)
	name := uniqueName(t)
	var c *Client
	testutil.Eventually(t, 15*time.Second, "external etcd answers", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		c, err = Connect(ctx, Config{Name: name, Endpoints: []string{url}, SessionTTL: testTTL})
		return err == nil
	})
	t.Cleanup(func() { c.Close() })
	s := join(t, c, assign.Member{ID: "a1"})
	if _, err := s.RenewNow(ctxT(t)); err != nil {
		t.Fatalf("RenewNow of a live session: %v", err)
	}

	testutil.Stop(t, cmd.Process.Pid) // stopped, not only signalled: it answers nothing now
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT) })
	type result struct {
		d   time.Time
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d, err := s.RenewNow(ctx)
		got <- result{d, err, time.Now()}
	}()
	<-s.Done()
	doneAt := time.Now()
	var r result
	select {
	case r = <-got:
	case <-time.After(testutil.Deadline(2 * time.Second)):
		// Let the store answer: the old RenewNow then reports a renewal
		// of the lost session.
		_ = cmd.Process.Signal(syscall.SIGCONT)
		r = <-got
		t.Fatalf("RenewNow still waited for the store %s after the session ended; it then returned deadline %s, %v",
			testutil.Deadline(2*time.Second), r.d, r.err)
	}
	if !errors.Is(r.err, ErrSessionLost) {
		t.Fatalf("RenewNow across the session's loss = %s, %v; want ErrSessionLost", r.d, r.err)
	}
	t.Logf("RenewNow ended %s after the session, %s after its local deadline: %v", r.at.Sub(doneAt), r.at.Sub(s.Deadline()), r.err)

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if d, err := s.RenewNow(ctxT(t)); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("RenewNow of a lost session = %s, %v; want ErrSessionLost", d, err)
	}
}
