package cluster

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchSpec is one key, or one directory (prefix true), to follow.
type watchSpec struct {
	key    string
	prefix bool
}

// followFuncs receive what follow reads and watches.
type followFuncs struct {
	// reset is called before a full read: forget every value seen (nil:
	// nothing to forget).
	reset func()
	// event is called for every value read and every change watched, with
	// the index of its watchSpec.
	event func(spec int, key string, value []byte, deleted bool)
	// settled is called after a full read and after each watch response
	// (one revision's changes): act on what was seen; false stops follow.
	settled func() bool
}

// follow reads specs at one revision and then watches them from the next,
// until settled returns false or ctx ends. Each spec resumes from its own
// next revision when its watch breaks (a lost etcd leader), so no change is
// missed or seen twice; when the history a watch needs has been compacted
// it reads everything again (reset first). Failed reads and broken watches
// are retried with jittered backoff.
func (c *Client) follow(ctx context.Context, specs []watchSpec, f followFuncs) {
	b := newBackoff()
	next := make([]int64, len(specs)) // all 0: read first
	for ctx.Err() == nil {
		if next[0] == 0 {
			// A serializable read (from whichever member answers, without
			// a round of the raft leader) is enough: the watches start
			// right after the revision it was read at, so whatever it
			// missed they deliver.
			ops := make([]clientv3.Op, len(specs))
			for i, s := range specs {
				if s.prefix {
					ops[i] = clientv3.OpGet(s.key, clientv3.WithPrefix(), clientv3.WithSerializable())
				} else {
					ops[i] = clientv3.OpGet(s.key, clientv3.WithSerializable())
				}
			}
			resp, err := c.etcd.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				if !pause(ctx, b) {
					return
				}
				continue
			}
			if f.reset != nil {
				f.reset()
			}
			for i, r := range resp.Responses {
				for _, kv := range r.GetResponseRange().Kvs {
					f.event(i, string(kv.Key), kv.Value, false)
				}
			}
			if !f.settled() {
				return
			}
			for i := range next {
				next[i] = resp.Header.Revision + 1
			}
		}
		if !c.followWatches(ctx, specs, next, f) {
			return
		}
		if !pause(ctx, b) {
			return
		}
	}
}

// followWatches watches specs from next until a watch breaks; it updates
// next (all 0 after a compaction) and reports false when settled asked to
// stop.
func (c *Client) followWatches(ctx context.Context, specs []watchSpec, next []int64, f followFuncs) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	chans := make([]clientv3.WatchChan, len(specs))
	for i, s := range specs {
		opts := []clientv3.OpOption{clientv3.WithRev(next[i]), clientv3.WithProgressNotify()}
		if s.prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		chans[i] = c.etcd.Watch(wctx, s.key, opts...)
	}
	merged, wait := fanIn(wctx, chans)
	defer wait()
	defer cancel() // before wait: the fan-in ends when the watches close
	for ir := range merged {
		wr := ir.wr
		if wr.CompactRevision != 0 {
			for i := range next {
				next[i] = 0
			}
			return true
		}
		if wr.Err() != nil || wr.Canceled {
			return true
		}
		if wr.IsProgressNotify() {
			next[ir.i] = max(next[ir.i], wr.Header.Revision+1)
			continue
		}
		for _, ev := range wr.Events {
			f.event(ir.i, string(ev.Kv.Key), ev.Kv.Value, ev.Type == clientv3.EventTypeDelete)
			next[ir.i] = max(next[ir.i], ev.Kv.ModRevision+1)
		}
		if !f.settled() {
			return false
		}
	}
	return true // the watches closed: ctx ended or the client closed
}

// indexed is a watch response with the index of the watch it came from.
type indexed struct {
	i  int
	wr clientv3.WatchResponse
}

// fanIn merges watch channels into one, which closes when every input has
// closed (cancel their context to end them); wait returns once the merged
// channel is closed and drained.
func fanIn(ctx context.Context, chans []clientv3.WatchChan) (<-chan indexed, func()) {
	out := make(chan indexed)
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wr := range ch {
				select {
				case out <- indexed{i: i, wr: wr}:
				case <-ctx.Done():
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(out)
		close(done)
	}()
	wait := func() {
		for range out {
		}
		<-done
	}
	return out, wait
}
