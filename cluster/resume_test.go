package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// An agent that dies without leaving (its client gone, its lease not
// revoked) is resumed by its next run before the lease expires: the same
// lease, its member record (start time kept, address updated) and its
// claims, which the resumed session counts as its own.
func TestResumeKeepsLeaseRecordAndClaims(t *testing.T) {
	name := uniqueName(t)
	// A TTL a loaded machine's reconnect fits in many times over.
	ttl := func(c *Config) { c.SessionTTL = 10 * time.Second }
	old := connect(t, shared.Endpoints(), name, ttl)
	m := assign.Member{ID: "a", Protocol: spec.ProtocolStatic}
	s1, err := old.Join(ctxT(t), m, "127.0.0.1:1111")
	if err != nil {
		t.Fatal(err)
	}
	won, _, err := s1.ClaimMany(ctxT(t), []string{"j1", "j2"})
	if err != nil || len(won) != 2 {
		t.Fatalf("claims: %v %v", won, err)
	}
	lease, started := int64(s1.Lease()), s1.Member().Started
	next, s2 := resumeAfterDeath(t, old, s1, name, m, ttl)
	if int64(s2.Lease()) != lease {
		t.Fatalf("resumed lease %x, want %x", int64(s2.Lease()), lease)
	}
	ms, err := next.Members(ctxT(t))
	if err != nil || len(ms) != 1 || ms[0].Addr != "127.0.0.1:2222" || !ms[0].Started.Equal(started) || ms[0].Lease != lease {
		t.Fatalf("members after resume: %+v %v (want a at :2222, started %s, lease %x)", ms, err, started, lease)
	}
	won, held, err := s2.ClaimMany(ctxT(t), []string{"j1", "j2", "j3"})
	if err != nil || len(won) != 3 || len(held) != 0 {
		t.Fatalf("claims after resume: won %v held %v err %v, want all three", won, held, err)
	}
	// The resumed session renews: it outlives the TTL.
	first := s2.LastRenewal()
	testutil.Eventually(t, 30*time.Second, "a renewal after the resume", func() bool { return s2.LastRenewal().After(first) })
	if s2.Err() != nil {
		t.Fatalf("resumed session ended: %v", s2.Err())
	}
}

// A lease that expired, or a member record bound to another lease, is not
// resumed: the agent joins anew.
func TestResumeRefused(t *testing.T) {
	name := uniqueName(t)
	c := connect(t, shared.Endpoints(), name, nil)
	m := assign.Member{ID: "b", Protocol: spec.ProtocolStatic}
	g, err := c.etcd.Grant(ctxT(t), int64(testTTL/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.etcd.Revoke(ctxT(t), g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resume(ctxT(t), m, "x:1", int64(g.ID)); !errors.Is(err, ErrNotResumable) {
		t.Fatalf("resume of a revoked lease: %v, want ErrNotResumable", err)
	}
	s := join(t, c, m)
	other, err := c.etcd.Grant(ctxT(t), int64(testTTL/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.etcd.Revoke(ctxT(t), other.ID) })
	if _, err := c.Resume(ctxT(t), m, "x:1", int64(other.ID)); !errors.Is(err, ErrNotResumable) {
		t.Fatalf("resume with a lease the record is not bound to: %v, want ErrNotResumable", err)
	}
	if s.Err() != nil || s.Lease() == clientv3.LeaseID(other.ID) {
		t.Fatalf("the live session was disturbed: %v", s.Err())
	}
}
