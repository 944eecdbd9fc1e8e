package cluster

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// oldMember registers a member the way an agent of the single-key layout
// does: its record, with no layout, bound to a lease of its own. The
// returned function makes it leave (its lease revoked).
func oldMember(t *testing.T, c *Client, m assign.Member) func() {
	t.Helper()
	ctx := ctxT(t)
	g, err := c.etcd.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	// The single-key layout's record: these fields, no "layout".
	rec := map[string]any{"id": m.ID, "protocol": m.Protocol, "connectors": m.Connectors, "tasks": m.Tasks,
		"addr": "127.0.0.1:9750", "started": time.Now().UTC()}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.etcd.Put(ctx, c.keys.Member(m.ID), string(b), clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	leave := func() { _, _ = c.etcd.Revoke(ctxT(t), g.ID) }
	t.Cleanup(leave)
	return leave
}

// legacyValue reads <prefix>/assignment as an agent of the single-key
// layout decodes it.
func legacyValue(t *testing.T, c *Client) (Published, int, bool) {
	t.Helper()
	resp, err := c.etcd.Get(ctxT(t), c.keys.Legacy())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return Published{}, 0, false
	}
	p, layout, err := decodeLegacy(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return p, layout, true
}

// While an agent of the single-key layout is a member, the leader also
// writes the whole assignment at <prefix>/assignment, in that layout's
// form, with the same generation as the shares; once it has left, the key
// is deleted.
func TestLeaderWritesSingleKeyLayoutWhileOldAgentsAreMembers(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	putConnector(t, c, "orders", "tasks = 2")
	putConnector(t, c, "billing", "tasks = 2")
	a := join(t, c, assign.Member{ID: "a", Tasks: []string{"orders-0", "orders-1"}})
	runLeader(t, c, a)
	waitPublished(t, c, "a runs orders", func(p Published) bool { return len(p.Assignment.Members["a"]) == 2 })
	if _, _, ok := legacyValue(t, c); ok {
		t.Fatal("single-key value written with no old agent in the cluster")
	}
	leave := oldMember(t, c, assign.Member{ID: "old", Protocol: spec.ProtocolStatic, Tasks: []string{"billing-0", "billing-1"}})
	var legacy Published
	testutil.Eventually(t, 10*time.Second, "the old agent's jobs in the single-key value", func() bool {
		p, layout, ok := legacyValue(t, c)
		legacy = p
		return ok && layout == Layout && slices.Equal(p.Assignment.Members["old"], []string{"billing-0", "billing-1"})
	})
	if !slices.Equal(legacy.Assignment.Members["a"], []string{"orders-0", "orders-1"}) || legacy.Leader != "a" {
		t.Fatalf("single-key value = %+v", legacy)
	}
	if h, err := c.Head(ctxT(t)); err != nil || h.Generation != legacy.Generation {
		t.Fatalf("head %+v (%v), single-key value generation %d: not one publication", h, err, legacy.Generation)
	}
	leave()
	testutil.Eventually(t, 10*time.Second, "single-key value deleted after the old agent left", func() bool {
		_, _, ok := legacyValue(t, c)
		return !ok
	})
}

// While a leader of the single-key layout leads, an agent of this layout
// follows its value; a leader of this layout that takes over continues its
// generations and rewrites every share.
func TestAgentFollowsSingleKeyLeaderUntilTakeover(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	putConnector(t, c, "orders", "tasks = 2")
	a := join(t, c, assign.Member{ID: "a", Protocol: spec.ProtocolBalanced})
	ctx := ctxT(t)
	watch := c.WatchShare(ctx, "a")
	// The old leader's publication: generation 7, a runs orders-0.
	old := Published{Generation: 7, Leader: "old", Assignment: assign.Assignment{
		Members: map[string][]string{"a": {"orders-0"}, "old": {"orders-1"}}}}
	v, err := encodeLegacy(old, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.etcd.Put(ctx, c.keys.Legacy(), string(v)); err != nil {
		t.Fatal(err)
	}
	s := <-watch
	if s.Generation != 7 || !slices.Equal(s.Jobs, []string{"orders-0"}) || s.Leader != "old" {
		t.Fatalf("share from the single-key leader = %+v", s)
	}
	if _, ok := s.Connectors["orders"]; !ok {
		t.Fatalf("share from the single-key leader names no connector orders: %v", s.Connectors)
	}
	// The old leader is gone (its agent has no record); a takes over.
	runLeader(t, c, a)
	s = <-watch
	if s.Generation != 8 || s.Leader != "a" || !slices.Equal(s.Jobs, []string{"orders-0", "orders-1"}) {
		t.Fatalf("share after takeover = %+v, want generation 8 by a with both jobs", s)
	}
	p, err := c.Assignment(ctx)
	if err != nil || p.Generation != 8 {
		t.Fatalf("Assignment = %+v, %v", p, err)
	}
	testutil.Eventually(t, 5*time.Second, "single-key value deleted (no old agent left)", func() bool {
		_, _, ok := legacyValue(t, c)
		return !ok
	})
}
