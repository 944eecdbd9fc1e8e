package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A publication that hands out more jobs than the claim window goes out in
// waves: a member's share is written only once the members of the earlier
// waves have claimed theirs, so no more than the window's jobs are ever
// handed out and unclaimed.
func TestClaimWindowPacesPublication(t *testing.T) {
	const window, members, perMember = 10, 6, 10
	name := uniqueName(t)
	var mu sync.Mutex
	var stats []PublishStats
	c := connect(t, shared.Endpoints(), name, func(cfg *Config) {
		cfg.ClaimWindow = window
		cfg.OnPublish = func(p PublishStats) {
			mu.Lock()
			stats = append(stats, p)
			mu.Unlock()
		}
	})
	c.waveTimeout = time.Minute // no wave goes out on time alone
	putConnector(t, c, "orders", fmt.Sprintf("tasks = %d", members*perMember))
	ctx, cancel := context.WithCancel(ctxT(t))
	var sessions []*Session
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	for i := range members {
		id := fmt.Sprintf("m%d", i)
		s := join(t, c, assign.Member{ID: id, Protocol: spec.ProtocolBalanced})
		sessions = append(sessions, s)
		watch := c.WatchShare(ctx, id)
		wg.Add(1)
		go func() { // the member claims what its share says
			defer wg.Done()
			for sh := range watch {
				if _, _, err := s.ClaimMany(ctx, sh.Jobs); err != nil {
					return
				}
			}
		}()
	}
	runLeader(t, c, sessions[0])
	testutil.Eventually(t, 20*time.Second, "every job claimed", func() bool {
		cl, err := c.Claims(context.Background())
		return err == nil && len(cl) == members*perMember
	})
	// The publication reports its stats once its last wave is out, which
	// may be after the last claim is seen.
	testutil.Eventually(t, 10*time.Second, "the publication's stats", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(stats) > 0
	})
	mu.Lock()
	if len(stats) != 1 || stats[0].Waves != members {
		t.Errorf("publications %+v, want one in %d waves", stats, members)
	}
	mu.Unlock()
	// Replay the store's history in revision order: shares written
	// (jobs handed out) against claims taken.
	resp, err := c.etcd.Get(ctx, c.keys.Prefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	out := 0
	for wr := range c.etcd.Watch(hctx, c.keys.Prefix(), clientv3.WithPrefix(), clientv3.WithRev(1)) {
		for _, ev := range wr.Events {
			key := string(ev.Kv.Key)
			switch {
			case ev.Type != clientv3.EventTypePut:
			case strings.HasPrefix(key, c.keys.ClaimsDir()):
				out--
			case strings.HasPrefix(key, c.keys.SharesDir()):
				ch, err := decodeShareChunk(ev.Kv.Value)
				if err != nil {
					t.Fatal(err)
				}
				out += len(ch.Jobs)
			}
			if out > window {
				t.Fatalf("at revision %d, %d jobs handed out and unclaimed, over the window of %d", ev.Kv.ModRevision, out, window)
			}
			if ev.Kv.ModRevision >= resp.Header.Revision {
				hcancel()
			}
		}
	}
}
