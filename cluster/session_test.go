package cluster

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"

	"github.com/berthd/berth/assign"
)

func TestJoinWritesMemberRecordAndCloseRemovesIt(t *testing.T) {
	name := uniqueName(t)
	c := connect(t, shared.Endpoints(), name, nil)
	ctx := ctxT(t)
	m := assign.Member{ID: "a1", Protocol: spec.ProtocolStatic, Connectors: []string{"orders"}, Tasks: []string{"billing-0"}}
	s, err := c.Join(ctx, m, "10.0.0.1:9750")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("members = %+v, want one", ms)
	}
	r := ms[0]
	if r.ID != "a1" || r.Protocol != spec.ProtocolStatic || r.Addr != "10.0.0.1:9750" ||
		len(r.Connectors) != 1 || r.Connectors[0] != "orders" || len(r.Tasks) != 1 || r.Tasks[0] != "billing-0" ||
		r.Lease != int64(s.Lease()) || r.Started.IsZero() {
		t.Fatalf("record = %+v", r)
	}

	// A second agent with the same ID is refused while the lease lives.
	if _, err := c.Join(ctx, m, "10.0.0.2:9750"); !errors.Is(err, ErrMemberExists) {
		t.Fatalf("duplicate join: err = %v, want ErrMemberExists", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if !errors.Is(s.Err(), ErrSessionClosed) {
		t.Fatalf("Err = %v, want ErrSessionClosed", s.Err())
	}
	ms, err = c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 0 {
		t.Fatalf("members after Close = %+v, want none", ms)
	}
	// The ID is free again: rejoin with a new lease.
	s2 := join(t, c, m)
	if s2.Lease() == s.Lease() {
		t.Fatal("rejoin reused the old lease")
	}
}

func TestSessionRenewsAndReportsLatency(t *testing.T) {
	var renewals atomic.Int64
	c := connect(t, shared.Endpoints(), uniqueName(t), func(cfg *Config) {
		cfg.OnRenew = func(d time.Duration) {
			if d > 0 {
				renewals.Add(1)
			}
		}
	})
	s := join(t, c, assign.Member{ID: "a1"})
	first := s.Deadline()
	// Two TTLs: the lease would have expired without renewal.
	testutil.Eventually(t, 3*testTTL, "three renewals", func() bool { return renewals.Load() >= 3 })
	if err := s.Err(); err != nil {
		t.Fatalf("session ended while renewing: %v", err)
	}
	if !s.Deadline().After(first) {
		t.Fatalf("deadline did not advance: %s then %s", first, s.Deadline())
	}
	if got, want := s.LastRenewal().Add(s.TTL()).Sub(s.Deadline()), time.Second; got != want {
		t.Fatalf("margin = %s, want max(1s, TTL/5) = %s", got, want)
	}
}

func TestSessionLostWhenLeaseRevokedElsewhere(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	s := join(t, c, assign.Member{ID: "a1"})
	if _, err := c.etcd.Revoke(ctxT(t), s.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(testutil.Deadline(testTTL)):
		t.Fatal("Done not closed within TTL after the lease was revoked")
	}
	if !errors.Is(s.Err(), ErrSessionLost) {
		t.Fatalf("Err = %v, want ErrSessionLost", s.Err())
	}
	if ok, _, err := s.Claim(ctxT(t), "orders"); ok || err == nil {
		t.Fatalf("claim on a lost session: ok=%v err=%v", ok, err)
	}
}

// TestSessionFencesBeforeServerExpiry partitions a member from a running
// etcd: its Done must fire before the server can expire the lease, and a
// second client must still see its record and claim then, and see them gone
// only after the server expired the lease.
func TestSessionFencesBeforeServerExpiry(t *testing.T) {
	name := uniqueName(t)
	px := testutil.StartProxy(t, shared.Endpoints()[0])
	agent := connect(t, []string{px.Endpoint()}, name, nil)
	observer := connect(t, shared.Endpoints(), name, nil)
	s := join(t, agent, assign.Member{ID: "a1"})
	ctx := ctxT(t)
	if ok, _, err := s.Claim(ctx, "orders-0"); !ok || err != nil {
		t.Fatalf("claim: ok=%v err=%v", ok, err)
	}
	// Let at least one renewal happen so the deadline is not the grant's.
	testutil.Eventually(t, 2*testTTL, "a renewal", func() bool { return s.LastRenewal().After(s.Member().Started) })

	px.Partition(testutil.Stall)
	<-s.Done()
	doneAt := time.Now()
	earliestExpiry := s.LastRenewal().Add(s.TTL())
	if !errors.Is(s.Err(), ErrSessionLost) {
		t.Fatalf("Err = %v, want ErrSessionLost", s.Err())
	}
	if !doneAt.Before(earliestExpiry) {
		t.Fatalf("Done at %s, not before the earliest server expiry %s", doneAt, earliestExpiry)
	}
	// The server has not expired the lease yet: record and claim visible.
	ms, err := observer.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := observer.Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(earliestExpiry) && (len(ms) != 1 || claims["orders-0"] != "a1") {
		t.Fatalf("at fencing time the server already dropped the member: members %+v claims %v", ms, claims)
	}
	// The claim frees itself when the server expires the lease, not before.
	if err := observer.WaitClaimFree(ctx, "orders-0"); err != nil {
		t.Fatal(err)
	}
	freedAt := time.Now()
	if freedAt.Before(earliestExpiry) {
		t.Fatalf("claim freed at %s, before the lease could expire at %s", freedAt, earliestExpiry)
	}
	ms, err = observer.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 0 {
		t.Fatalf("member record outlived its lease: %+v", ms)
	}
	t.Logf("fenced %s before the earliest server expiry; claim freed %s after it",
		earliestExpiry.Sub(doneAt), freedAt.Sub(earliestExpiry))
}

// WaitMemberGone returns once the record of the ID is deleted (here by the
// holder's Close), not before; then the ID joins at once.
func TestWaitMemberGone(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	ctx := ctxT(t)
	m := assign.Member{ID: "w1", Protocol: spec.ProtocolStatic}
	if err := c.WaitMemberGone(ctx, "w1"); err != nil {
		t.Fatalf("no record yet: %v", err)
	}
	s := join(t, c, m)
	gone := make(chan error, 1)
	go func() { gone <- c.WaitMemberGone(ctx, "w1") }()
	// Still held: the wait has not returned once the second join is refused.
	if _, err := c.Join(ctx, m, "10.0.0.2:9750"); !errors.Is(err, ErrMemberExists) {
		t.Fatalf("duplicate join: err = %v, want ErrMemberExists", err)
	}
	select {
	case err := <-gone:
		t.Fatalf("WaitMemberGone returned %v while the record is held", err)
	default:
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-gone; err != nil {
		t.Fatalf("WaitMemberGone after Close: %v", err)
	}
	s2 := join(t, c, m)
	_ = s2.Close()
}

// A session whose grant was sent long ago (a join slowed by a busy store)
// renews at once, not a whole renewal interval after its loop started:
// that would leave too little of the TTL for the renewal's round trip.
func TestSlowJoinRenewsAtOnce(t *testing.T) {
	// A TTL long enough that "at once" and "a whole interval later" (16 s)
	// stay far apart on a loaded machine.
	const ttl = 60 * time.Second
	c := connect(t, shared.Endpoints(), uniqueName(t), func(cfg *Config) { cfg.SessionTTL = ttl })
	g, err := c.etcd.Grant(ctxT(t), int64(ttl/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// As if the grant had been sent 30 s ago: 18 s of the 48 s before the
	// local deadline left, more than one renewal interval (16 s).
	sent := time.Now().Add(-30 * time.Second)
	start := time.Now()
	s := c.startSession(MemberRecord{ID: "slow"}, g.ID, sent, 0)
	t.Cleanup(func() { s.Close() })
	testutil.Eventually(t, ttl, "a renewal", func() bool { return s.LastRenewal().After(sent) })
	if late := s.LastRenewal().Sub(start); late > renewInterval(ttl)/2 {
		t.Fatalf("first renewal sent %s after the session started; want it at once, not an interval (%s) later", late, renewInterval(ttl))
	}
}
