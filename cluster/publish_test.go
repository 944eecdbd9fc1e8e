package cluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// sharesOf reads every share with SharesPage, limit per page.
func sharesOf(t *testing.T, c *Client, limit int) map[string]Share {
	t.Helper()
	out := map[string]Share{}
	after, rev := "", int64(0)
	for {
		p, err := c.SharesPage(ctxT(t), after, limit, rev)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Shares {
			if _, dup := out[s.Member]; dup {
				t.Fatalf("member %s on two pages", s.Member)
			}
			out[s.Member] = s
		}
		if p.Next == "" {
			return out
		}
		after, rev = p.Next, p.Revision
	}
}

// checkComplete fails unless every job of conns is assigned exactly once
// in p and the head agrees with p.
func checkComplete(t *testing.T, c *Client, p Published, jobs int) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "publication finished", func() bool {
		h, err := c.Head(context.Background())
		return err == nil && h.Generation >= p.Generation
	})
	p, err := c.Assignment(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for m, js := range p.Assignment.Members {
		for _, j := range js {
			if other, dup := seen[j]; dup {
				t.Fatalf("job %s assigned to %s and %s", j, other, m)
			}
			seen[j] = m
		}
	}
	if len(seen)+len(p.Assignment.Unassigned) != jobs {
		t.Fatalf("%d assigned + %d unassigned, want %d jobs", len(seen), len(p.Assignment.Unassigned), jobs)
	}
	h, err := c.Head(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if h.Generation != p.Generation || h.Jobs != len(seen) || h.Members != len(p.Assignment.Members) ||
		h.Unassigned != len(p.Assignment.Unassigned) || h.Layout != Layout {
		t.Fatalf("head %+v does not match the assignment (generation %d, %d jobs, %d members)",
			h, p.Generation, len(seen), len(p.Assignment.Members))
	}
}

// A real etcd started with tiny limits (8 operations, 16 KiB per request)
// accepts every transaction of a publication of 2,000 jobs over 12 members
// (shares of several chunks, several transactions per generation) and of a
// batched claim of 700 jobs: a transaction over either limit would be
// refused by the server. The largest request the clients sent stays under
// the limit.
func TestPublicationAndClaimsWithinEtcdLimits(t *testing.T) {
	const ops, bytes = 8, 16 * 1024
	_, url := startExternalEtcd(t, "--max-txn-ops", fmt.Sprint(ops), "--max-request-bytes", fmt.Sprint(bytes))
	name := uniqueName(t)
	var traffic Traffic
	mod := func(cfg *Config) { cfg.MaxTxnOps, cfg.MaxRequestBytes, cfg.Traffic = ops, bytes, &traffic }
	var c *Client
	testutil.Eventually(t, 15*time.Second, "external etcd answers", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cfg := Config{Name: name, Endpoints: []string{url}, SessionTTL: testTTL, Validate: testValidator}
		mod(&cfg)
		var err error
		c, err = Connect(ctx, cfg)
		return err == nil
	})
	t.Cleanup(func() { c.Close() })
	// 20 connectors × 100 tasks; "big" runs 1,000 of them (static), the
	// other 11 members share the rest.
	for i := range 20 {
		putConnector(t, c, fmt.Sprintf("conn%02d", i), "tasks = 100")
	}
	var big []string
	for i := range 10 {
		for n := range 100 {
			big = append(big, spec.TaskID(fmt.Sprintf("conn%02d", i), n))
		}
	}
	sessions := []*Session{join(t, c, assign.Member{ID: "big", Protocol: spec.ProtocolStatic, Tasks: big})}
	for i := range 11 {
		sessions = append(sessions, join(t, c, assign.Member{ID: fmt.Sprintf("m%02d", i), Protocol: spec.ProtocolStatic}))
	}
	errc, _ := runLeader(t, c, sessions[0])
	p := waitPublished(t, c, "2,000 jobs assigned", func(p Published) bool {
		n := 0
		for _, js := range p.Assignment.Members {
			n += len(js)
		}
		return n == 2000
	})
	checkComplete(t, c, p, 2000)
	if got := len(p.Assignment.Members["big"]); got != 1000 {
		t.Fatalf("big runs %d jobs, want its 1,000 declared", got)
	}
	st, ok, err := c.Share(ctxT(t), "big")
	if err != nil || !ok || !slices.Equal(st.Jobs, p.Assignment.Members["big"]) || len(st.Connectors) != 10 {
		t.Fatalf("Share(big) = %d jobs, %d connectors, %v", len(st.Jobs), len(st.Connectors), err)
	}
	resp, err := c.etcd.Get(ctxT(t), c.keys.ShareDir("big"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count < 2 {
		t.Fatalf("big's share is in %d chunks (%v), want several under a 16 KiB request limit", resp.Count, err)
	}
	if got := sharesOf(t, c, 5); len(got) != 12 {
		t.Fatalf("paged shares: %d members, want 12", len(got))
	}

	won, held, err := sessions[1].ClaimMany(ctxT(t), p.Assignment.Members["big"][:700])
	if err != nil || len(won) != 700 || len(held) != 0 {
		t.Fatalf("ClaimMany of 700: won %d, held %d, %v", len(won), len(held), err)
	}
	if err := sessions[1].ReleaseMany(ctxT(t), won); err != nil {
		t.Fatal(err)
	}
	claims, err := c.Claims(ctxT(t))
	if err != nil || len(claims) != 0 {
		t.Fatalf("claims after ReleaseMany: %d, %v", len(claims), err)
	}
	select {
	case err := <-errc:
		t.Fatalf("leader stopped: %v", err)
	default:
	}
	if got := traffic.LargestSent(); got > bytes {
		t.Fatalf("largest request %d bytes, over the %d-byte limit", got, bytes)
	}
	t.Logf("largest request %d bytes of %d; %d requests", traffic.LargestSent(), bytes, traffic.Requests())
}

// A change that concerns one member rewrites only that member's share: the
// others keep their generation.
func TestPublicationWritesOnlyChangedShares(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	putConnector(t, c, "orders", "tasks = 2")
	putConnector(t, c, "billing", "tasks = 2")
	a := join(t, c, assign.Member{ID: "a", Tasks: []string{"orders-0", "orders-1"}})
	join(t, c, assign.Member{ID: "b", Tasks: []string{"billing-0", "billing-1"}})
	runLeader(t, c, a)
	p := waitPublished(t, c, "both run their declared jobs", func(p Published) bool {
		return len(p.Assignment.Members["a"]) == 2 && len(p.Assignment.Members["b"]) == 2
	})
	before := sharesOf(t, c, 1)
	putConnector(t, c, "billing", "tasks = 2 # a new revision of billing's definition")
	p = waitPublished(t, c, "a new generation", func(q Published) bool { return q.Generation > p.Generation })
	after := sharesOf(t, c, 1)
	if after["a"].Generation != before["a"].Generation {
		t.Fatalf("a's share rewritten (generation %d -> %d) by a change of b's connector", before["a"].Generation, after["a"].Generation)
	}
	if after["b"].Generation != p.Generation || after["b"].Connectors["billing"] <= before["b"].Connectors["billing"] {
		t.Fatalf("b's share = %+v, want generation %d with billing's new revision (was %d)", after["b"], p.Generation, before["b"].Connectors["billing"])
	}
}

// A departed member's share becomes a "departed" tombstone, which its
// watcher sees, and leaves the assembled assignment.
func TestDepartedMemberGetsTombstone(t *testing.T) {
	name := uniqueName(t)
	c := connect(t, shared.Endpoints(), name, nil)
	cb := connect(t, shared.Endpoints(), name, nil)
	putConnector(t, c, "orders", "tasks = 4")
	a := join(t, c, assign.Member{ID: "a", Protocol: spec.ProtocolBalanced})
	b := join(t, cb, assign.Member{ID: "b", Protocol: spec.ProtocolBalanced})
	runLeader(t, c, a)
	ctx := ctxT(t)
	watch := cb.WatchShare(ctx, "b")
	var s Share
	for len(s.Jobs) != 2 {
		s = <-watch
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	s = <-watch
	if !s.Departed || len(s.Jobs) != 0 {
		t.Fatalf("after b left its share is %+v, want departed", s)
	}
	p, err := c.Assignment(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Assignment.Members["b"]; ok || len(p.Assignment.Members["a"]) != 4 {
		t.Fatalf("assignment after b left: %v", p.Assignment.Members)
	}
}

// Definitions reads the named connectors and their groups, nothing else.
func TestDefinitionsReadsOwnConnectorsAndGroups(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	putConnector(t, c, "orders", "tasks = 1\ngroup = \"etl\"")
	putConnector(t, c, "billing", "tasks = 1\ngroup = \"other\"")
	if err := c.PutGroup(ctxT(t), "etl", []byte("")); err != nil {
		t.Fatal(err)
	}
	if err := c.PutGroup(ctxT(t), "other", []byte("")); err != nil {
		t.Fatal(err)
	}
	conns, groups, err := c.Definitions(ctxT(t), []string{"orders", "gone"})
	if err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string][]byte) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	if !slices.Equal(keys(conns), []string{"orders"}) || !slices.Equal(keys(groups), []string{"etl"}) {
		t.Fatalf("Definitions = %v, %v; want orders and its group etl", keys(conns), keys(groups))
	}
}
