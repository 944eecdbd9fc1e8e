package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

// An agent's share watch reads only its own share: publications that
// change only other members' shares cost it nothing, and its own change
// costs about the size of its share.
func TestShareWatchReadsOnlyOwnShare(t *testing.T) {
	name := uniqueName(t)
	// Eleven sessions and 1,100 jobs: a TTL whose local deadline a loaded
	// machine's slow renewal does not miss (the test measures traffic, not
	// fencing).
	c := connect(t, shared.Endpoints(), name, func(cfg *Config) { cfg.SessionTTL = 10 * time.Second })
	var traffic Traffic
	watcher := connect(t, shared.Endpoints(), name, func(cfg *Config) { cfg.Traffic = &traffic })
	var tasks []string
	for i := range 100 {
		tasks = append(tasks, spec.TaskID("mine", i))
	}
	slices.Sort(tasks)
	putConnector(t, c, "mine", "tasks = 100")
	putConnector(t, c, "theirs", "tasks = 1000")
	a := join(t, c, assign.Member{ID: "a", Tasks: tasks})
	for i := range 10 { // standbys: they run what nobody declares
		join(t, c, assign.Member{ID: fmt.Sprintf("o%d", i), Protocol: spec.ProtocolStatic})
	}
	ctx := ctxT(t)
	runLeader(t, c, a)
	watch := watcher.WatchShare(ctx, "a")
	s := <-watch
	for len(s.Jobs) != 100 {
		s = <-watch
	}
	// Ten generations that move 1,000 jobs among the others.
	base := traffic.Received()
	gen := s.Generation
	for i := range 10 {
		putConnector(t, c, "theirs", fmt.Sprintf("tasks = %d", 1000+i+1))
	}
	waitPublished(t, c, "theirs grown", func(p Published) bool {
		n := 0
		for _, js := range p.Assignment.Members {
			n += len(js)
		}
		return n == 1100+10
	})
	if got := traffic.Received() - base; got > 512 {
		t.Fatalf("the share watch of a read %d bytes while only others' shares changed", got)
	}
	// Its own share changes: one delivery, about its size.
	base = traffic.Received()
	putConnector(t, c, "mine", "tasks = 100 # new revision")
	select {
	case s = <-watch:
	case <-time.After(testutil.Deadline(10 * time.Second)):
		t.Fatalf("no share after mine's definition changed (a's session: %v)", a.Err())
	}
	got := traffic.Received() - base
	if s.Generation <= gen || !slices.Equal(s.Jobs, tasks) || got > 4096 {
		t.Fatalf("share generation %d (was %d), %d jobs, read %d bytes", s.Generation, gen, len(s.Jobs), got)
	}
	t.Logf("own share of 100 jobs: %d bytes read", got)
}

// A share cut into several chunks is delivered only once every chunk of
// its generation is stored.
func TestShareWatchWaitsForAllChunks(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	ctx := ctxT(t)
	watch := c.WatchShare(ctx, "a")
	put := func(gen int64, i, n int, jobs ...string) {
		v, err := jsonString(shareChunk{Generation: gen, Leader: "l", Chunk: i, Chunks: n, Jobs: jobs})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.etcd.Put(ctx, c.keys.ShareChunk("a", i), v); err != nil {
			t.Fatal(err)
		}
	}
	put(1, 0, 2, "x")
	put(1, 1, 2, "y")
	if s := <-watch; s.Generation != 1 || !slices.Equal(s.Jobs, []string{"x", "y"}) {
		t.Fatalf("first share %+v", s)
	}
	// Chunk 0 of generation 2 alone (chunk 1 still of generation 1) is
	// incomplete: the next delivery must be the whole of generation 2.
	put(2, 0, 2, "x2")
	put(2, 1, 2, "y2")
	if s := <-watch; s.Generation != 2 || !slices.Equal(s.Jobs, []string{"x2", "y2"}) {
		t.Fatalf("second share %+v, want generation 2 whole", s)
	}
	// A share that shrinks to one chunk is complete at once; the stray
	// chunk 1 of generation 2 is ignored.
	put(3, 0, 1, "z")
	if s := <-watch; s.Generation != 3 || !slices.Equal(s.Jobs, []string{"z"}) {
		t.Fatalf("third share %+v", s)
	}
}
