package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The election is etcd's concurrency.Election protocol, done on the
// session's own lease: a candidate creates <prefix>/leader/<lease in hex>
// (value: its member ID, bound to its lease) and leads once every candidate
// key with a lower create revision is gone. Keys, values and order are
// those of concurrency.Election, so agents of the single-key layout and of
// this one take part in one election. Unlike concurrency.Session it starts
// no keep-alive stream of its own: the Session's renewals are the only ones
// (one per agent).

// campaign blocks until s's member is leader; release resigns (deletes our
// candidate key if the session is still live). It returns an error wrapping
// the session's error when s ends, ctx.Err() when ctx ends, or a store
// error when the candidate key cannot be written.
func (c *Client) campaign(ctx context.Context, s *Session, clock func() time.Time) (*leader, func(), error) {
	if err := s.Err(); err != nil {
		return nil, nil, fmt.Errorf("campaign as %s: %w", s.record.ID, err)
	}
	lctx, cancel := context.WithCancel(s.ctx) // ends with the session
	stop := context.AfterFunc(ctx, cancel)
	fail := func(err error) (*leader, func(), error) {
		stop()
		cancel()
		if serr := s.Err(); serr != nil {
			return nil, nil, fmt.Errorf("campaign as %s: %w", s.record.ID, serr)
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("campaign as %s: %w", s.record.ID, err)
	}
	key := fmt.Sprintf("%s%x", c.keys.LeaderDir(), int64(s.lease))
	resp, err := c.etcd.Txn(lctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, s.record.ID, clientv3.WithLease(s.lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fail(fmt.Errorf("write candidate key %s: %w", key, err))
	}
	rev := resp.Header.Revision
	if !resp.Succeeded {
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		rev = kv.CreateRevision
		if string(kv.Value) != s.record.ID {
			if _, err := c.etcd.Put(lctx, key, s.record.ID, clientv3.WithIgnoreLease()); err != nil {
				return fail(fmt.Errorf("rewrite candidate key %s: %w", key, err))
			}
		}
	}
	resign := func() {
		rctx, rcancel := context.WithTimeout(context.Background(), s.ttl)
		defer rcancel()
		// Best effort: the key goes with the lease anyway.
		_, _ = c.etcd.Txn(rctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).Commit()
	}
	if err := c.waitDeletes(lctx, rev-1); err != nil {
		if s.Err() == nil {
			resign()
		}
		return fail(err)
	}
	l := &leader{c: c, s: s, clock: clock, key: key, rev: rev}
	release := func() {
		if s.Err() == nil {
			resign()
		}
		stop()
		cancel()
	}
	return l, release, nil
}

// waitDeletes returns once no candidate key with a create revision up to
// maxRev exists, or ctx's error. A broken watch or failed read is retried
// with backoff.
func (c *Client) waitDeletes(ctx context.Context, maxRev int64) error {
	b := newBackoff()
	for {
		resp, err := c.etcd.Get(ctx, c.keys.LeaderDir(),
			append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(maxRev))...)
		if err == nil && len(resp.Kvs) == 0 {
			return nil
		}
		if err == nil {
			err = c.waitDelete(ctx, string(resp.Kvs[0].Key), resp.Header.Revision+1)
			if err == nil {
				b.Reset()
				continue
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !pause(ctx, b) {
			return ctx.Err()
		}
	}
}

// errWatchLost: a watch ended without the awaited event; read again.
var errWatchLost = errors.New("watch ended")

// waitDelete returns nil once key is deleted at a revision from rev on, or
// an error when the watch ends first (ctx, compaction, lost etcd leader).
func (c *Client) waitDelete(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range c.etcd.Watch(wctx, key, clientv3.WithRev(rev)) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", key, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	return fmt.Errorf("watch %s: %w", key, errWatchLost)
}
