package cluster

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"

	"github.com/berthd/berth/assign"
)

// runLeader runs RunLeader for s in the background; the returned channel
// yields its result.
func runLeader(t *testing.T, c *Client, s *Session) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		errc <- c.RunLeader(ctx, s, nil)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return errc, cancel
}

// waitPublished waits until the published assignment satisfies cond.
func waitPublished(t *testing.T, c *Client, what string, cond func(Published) bool) Published {
	t.Helper()
	var p Published
	testutil.Eventually(t, 10*time.Second, what, func() bool {
		var err error
		p, err = c.Assignment(context.Background())
		return err == nil && cond(p)
	})
	return p
}

func putConnector(t *testing.T, c *Client, name, body string) {
	t.Helper()
	if err := c.PutConnector(ctxT(t), name, []byte(body)); err != nil {
		t.Fatal(err)
	}
}

func TestLeaderPublishesGenerationsInOrder(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	s := join(t, c, assign.Member{ID: "a1", Protocol: spec.ProtocolBalanced})
	ctx := ctxT(t)
	watch := c.WatchAssignment(ctx)
	runLeader(t, c, s)

	first := <-watch
	if first.Generation != 1 || first.Leader != "a1" {
		t.Fatalf("first published = %+v, want generation 1 by a1", first)
	}
	putConnector(t, c, "orders", "tasks = 2")
	putConnector(t, c, "billing", "run = true")
	want := []string{"billing", "orders-0", "orders-1"}
	last := first
	for !slices.Equal(last.Assignment.Members["a1"], want) {
		select {
		case p := <-watch:
			if p.Generation != last.Generation+1 {
				t.Fatalf("generation %d after %d: not in order by one", p.Generation, last.Generation)
			}
			last = p
		case <-ctx.Done():
			t.Fatalf("no assignment %v; last %+v", want, last)
		}
	}
	// A write of the same body moves only billing's revision: the leader
	// publishes it with the delete when it sees both at once, else (a
	// loaded machine) one generation before the delete's.
	putConnector(t, c, "billing", "run = true")
	if err := c.DeleteConnector(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	p := <-watch
	if p.Generation == last.Generation+1 && slices.Equal(p.Assignment.Members["a1"], want) {
		last, p = p, <-watch
	}
	if p.Generation != last.Generation+1 || slices.Contains(p.Assignment.Members["a1"], "billing") {
		t.Fatalf("after delete: %+v (previous generation %d)", p, last.Generation)
	}
	got, err := c.Assignment(ctx)
	if err != nil || got.Generation != p.Generation {
		t.Fatalf("Assignment() = %+v, %v; want generation %d", got, err, p.Generation)
	}
}

func TestLeaderFailoverAndStaticReturn(t *testing.T) {
	name := uniqueName(t)
	ca := connect(t, shared.Endpoints(), name, nil)
	cb := connect(t, shared.Endpoints(), name, nil)
	putConnector(t, ca, "orders", "run = true")
	sa := join(t, ca, assign.Member{ID: "a", Connectors: []string{"orders"}})
	sb := join(t, cb, assign.Member{ID: "b"}) // standby
	errA, _ := runLeader(t, ca, sa)
	waitPublished(t, ca, "a leads and runs orders", func(p Published) bool {
		return p.Leader == "a" && slices.Equal(p.Assignment.Members["a"], []string{"orders"})
	})
	runLeader(t, cb, sb)

	// The leader's session ends: its RunLeader returns, b takes over and,
	// with rebalance_delay 0, gives the departed declarer's job to the standby.
	if err := sa.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errA:
		if !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("RunLeader after Close = %v, want ErrSessionClosed", err)
		}
	case <-time.After(testutil.Deadline(5 * time.Second)):
		t.Fatal("RunLeader did not return after its session closed")
	}
	p := waitPublished(t, cb, "b leads and runs orders", func(p Published) bool {
		return p.Leader == "b" && slices.Equal(p.Assignment.Members["b"], []string{"orders"})
	})
	if _, ok := p.Assignment.Members["a"]; ok {
		t.Fatalf("departed member still assigned: %+v", p.Assignment)
	}
	// The declarer returns: its job moves back to it (rule 1).
	join(t, ca, assign.Member{ID: "a", Connectors: []string{"orders"}})
	waitPublished(t, cb, "orders back on a", func(p Published) bool {
		return slices.Equal(p.Assignment.Members["a"], []string{"orders"}) && len(p.Assignment.Members["b"]) == 0
	})
}

func TestStaleLeaderCannotPublish(t *testing.T) {
	name := uniqueName(t)
	ca := connect(t, shared.Endpoints(), name, nil)
	cb := connect(t, shared.Endpoints(), name, nil)
	sa := join(t, ca, assign.Member{ID: "a"})
	sb := join(t, cb, assign.Member{ID: "b"})
	ctx := ctxT(t)

	la, releaseA, err := ca.campaign(ctx, sa, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseA()
	if _, err := la.load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := la.publish(ctx, assign.Assignment{Members: map[string][]string{"a": {"x"}}}); err != nil {
		t.Fatalf("leader publish: %v", err)
	}
	// a's election key goes away (its lease is revoked as if expired);
	// b wins and publishes generation 2.
	if _, err := cb.etcd.Revoke(ctx, sa.Lease()); err != nil {
		t.Fatal(err)
	}
	lb, releaseB, err := cb.campaign(ctx, sb, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseB()
	if _, err := lb.load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lb.publish(ctx, assign.Assignment{Members: map[string][]string{"b": {"x"}}}); err != nil {
		t.Fatalf("new leader publish: %v", err)
	}
	// The deposed leader still believes it leads: its write is refused.
	err = la.publish(ctx, assign.Assignment{Members: map[string][]string{"a": {"x", "y"}}})
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("stale publish: err = %v, want ErrNotLeader", err)
	}
	p, err := cb.Assignment(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Generation != 2 || p.Leader != "b" || !slices.Equal(p.Assignment.Members["b"], []string{"x"}) {
		t.Fatalf("published = %+v, want b's generation 2", p)
	}
}

func TestLeaderHoldsDepartedJobsForRebalanceDelay(t *testing.T) {
	const delay = 1500 * time.Millisecond
	name := uniqueName(t)
	mod := func(cfg *Config) { cfg.RebalanceDelay = delay }
	ca := connect(t, shared.Endpoints(), name, mod)
	cb := connect(t, shared.Endpoints(), name, mod)
	putConnector(t, cb, "orders", "run = true")
	sa := join(t, ca, assign.Member{ID: "a", Connectors: []string{"orders"}})
	sb := join(t, cb, assign.Member{ID: "b"})
	runLeader(t, cb, sb)
	waitPublished(t, cb, "orders on a", func(p Published) bool {
		return slices.Equal(p.Assignment.Members["a"], []string{"orders"})
	})
	left := time.Now()
	if err := sa.Close(); err != nil {
		t.Fatal(err)
	}
	held := waitPublished(t, cb, "orders held for a", func(p Published) bool {
		return p.Assignment.Held["orders"] == "a"
	})
	if _, ok := held.Assignment.Unassigned["orders"]; !ok || len(held.Assignment.Members["b"]) != 0 {
		t.Fatalf("held assignment = %+v", held.Assignment)
	}
	// A new leader would see when a left.
	if v, err := cb.etcd.Get(ctxT(t), cb.keys.LastSeen("a")); err != nil || len(v.Kvs) != 1 {
		t.Fatalf("lastseen/a not stored: %v %v", v, err)
	}
	// Nothing else changes: only the rule 5 timer moves orders to b.
	moved := waitPublished(t, cb, "orders moved to b after the delay", func(p Published) bool {
		return slices.Equal(p.Assignment.Members["b"], []string{"orders"})
	})
	if since := time.Since(left); since < delay {
		t.Fatalf("orders moved %s after a left, before rebalance delay %s", since, delay)
	}
	if moved.Generation != held.Generation+1 {
		t.Fatalf("generation %d after held generation %d", moved.Generation, held.Generation)
	}
	testutil.Eventually(t, 5*time.Second, "lastseen/a pruned", func() bool {
		v, err := cb.etcd.Get(context.Background(), cb.keys.LastSeen("a"))
		return err == nil && len(v.Kvs) == 0
	})
}

// A new cluster's first generation waits for its members to gather,
// unless the store is the agent's alone (the embedded etcd): then it is
// paced as every later generation.
func TestFirstGenerationSettle(t *testing.T) {
	for _, tc := range []struct {
		sole       bool
		generation int64
		quiet      time.Duration
		most       time.Duration
	}{
		{false, 0, settleQuietFirst, settleMaxFirst},
		{false, 3, settleQuiet, settleMax},
		{true, 0, settleQuiet, settleMax},
		{true, 3, settleQuiet, settleMax},
	} {
		l := &leader{c: &Client{cfg: Config{SoleMember: tc.sole}}, pub: pubState{generation: tc.generation}}
		if q, m := l.settle(); q != tc.quiet || m != tc.most {
			t.Errorf("sole member %v, generation %d: settle %v, %v; want %v, %v", tc.sole, tc.generation, q, m, tc.quiet, tc.most)
		}
	}
}
