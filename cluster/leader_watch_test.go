package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

// startLeader runs a won election's loop in the background (so the test
// can read its state) and returns the leader.
func startLeader(t *testing.T, c *Client, s *Session) *leader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l, release, err := c.campaign(ctx, s, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		_ = l.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
		release()
	})
	return l
}

// cutLeader connects the leader through a proxy, makes it lead, and
// returns a direct client of the same cluster, the leader and the proxy.
func cutLeader(t *testing.T) (*Client, *leader, *testutil.Proxy) {
	name := uniqueName(t)
	px := testutil.StartProxy(t, shared.Endpoints()[0])
	// A 10 s TTL: the cut below (a few seconds with gRPC's reconnect
	// backoff) must not cost the leader its session.
	long := func(cfg *Config) { cfg.SessionTTL = 10 * time.Second }
	lc := connect(t, []string{px.Endpoint()}, name, long)
	direct := connect(t, shared.Endpoints(), name, long)
	s := join(t, lc, assign.Member{ID: "a", Protocol: spec.ProtocolBalanced})
	l := startLeader(t, lc, s)
	waitPublished(t, direct, "first generation", func(p Published) bool { return p.Generation >= 1 })
	return direct, l, px
}

// A watch broken by a lost connection resumes from its revision: the
// change made meanwhile is published with no full read of the state.
func TestLeaderWatchResumesWithoutReading(t *testing.T) {
	direct, l, px := cutLeader(t)
	px.Partition(testutil.Reset)
	putConnector(t, direct, "orders", "tasks = 2") // while the leader is cut off
	px.Heal()
	waitPublished(t, direct, "orders published after the leader reconnected", func(p Published) bool {
		return slices.Equal(p.Assignment.Members["a"], []string{"orders-0", "orders-1"})
	})
	if n := l.loads.Load(); n != 1 {
		t.Fatalf("leader read its whole state %d times, want once (at takeover)", n)
	}
}

// When the revision a broken watch needs has been compacted, the leader
// reads its whole state again and publishes what changed meanwhile.
func TestLeaderReadsAgainAfterCompaction(t *testing.T) {
	direct, l, px := cutLeader(t)
	px.Partition(testutil.Reset)
	putConnector(t, direct, "orders", "tasks = 2")
	resp, err := direct.etcd.Get(ctxT(t), "compact-here")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.etcd.Compact(ctxT(t), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	px.Heal()
	waitPublished(t, direct, "orders published after the leader read again", func(p Published) bool {
		return slices.Equal(p.Assignment.Members["a"], []string{"orders-0", "orders-1"})
	})
	if n := l.loads.Load(); n < 2 {
		t.Fatalf("leader read its whole state %d times, want again after the compaction", n)
	}
}
