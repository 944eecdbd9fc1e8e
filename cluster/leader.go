package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/berthd/berth/assign"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// RunLeader campaigns for leadership (a concurrency.Election on
// <prefix>/leader, bound to s's lease) and, while leader, keeps the published
// assignment equal to assign.Compute of the live members, the stored
// connectors and the previous assignment (DESIGN.md "The assignment
// function"). It recomputes on every change of members or connectors and,
// for rule 5, when a departed member's RebalanceDelay runs out. A result
// that differs from the published one is published with generation+1 in one
// transaction guarded by the leader key (its create revision must still be
// ours), so a deposed leader can never overwrite its successor.
//
// LastSeen for rule 5: live members are seen now (clock()); when a member
// record disappears the leader stores <prefix>/lastseen/<id> = clock() (also
// guarded), so a new leader applies the same delay. A member that is named
// in the previous assignment but has neither a record nor a lastseen key
// (it left while there was no leader) counts as seen when this leader took
// over. A lastseen key is deleted when its member returns, or when its delay
// has run out and the member holds no jobs in the published assignment.
//
// clock supplies Now (nil: time.Now); timers run on the real clock.
//
// RunLeader blocks. It returns ctx.Err() after resigning when ctx ends, an
// error wrapping ErrSessionLost or ErrSessionClosed when s ends, ErrNotLeader
// (wrapped) when leadership is lost otherwise, or a store error while
// campaigning. Call it again with a live session to campaign again.
func (c *Client) RunLeader(ctx context.Context, s *Session, clock func() time.Time) error {
	if clock == nil {
		clock = time.Now
	}
	l, release, err := c.campaign(ctx, s, clock)
	if err != nil {
		return err
	}
	defer release()
	return l.run(ctx)
}

// leader is the state of a won election.
type leader struct {
	c     *Client
	s     *Session
	clock func() time.Time
	key   string // our election key
	rev   int64  // its create revision: the fencing token of every write

	members    map[string]MemberRecord
	connectors map[string]*kvPair
	lastSeen   map[string]time.Time // departed members only
	published  Published
}

// campaign blocks until s's member is leader; release resigns (if still
// possible) and stops the election session's keep-alive without revoking
// the lease.
func (c *Client) campaign(ctx context.Context, s *Session, clock func() time.Time) (*leader, func(), error) {
	if err := s.Err(); err != nil {
		return nil, nil, fmt.Errorf("campaign as %s: %w", s.record.ID, err)
	}
	lctx, cancel := context.WithCancel(s.ctx) // ends with the session
	stop := context.AfterFunc(ctx, cancel)
	// concurrency.Session adds its own KeepAlive stream on our lease. That
	// only renews more often; fencing still uses the Session's own renewals.
	cs, err := concurrency.NewSession(c.etcd, concurrency.WithLease(s.lease), concurrency.WithContext(lctx))
	if err != nil {
		stop()
		cancel()
		return nil, nil, fmt.Errorf("campaign as %s: election session: %w", s.record.ID, err)
	}
	el := concurrency.NewElection(cs, c.key("leader"))
	if err := el.Campaign(lctx, s.record.ID); err != nil {
		cs.Orphan()
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
	l := &leader{c: c, s: s, clock: clock, key: el.Key(), rev: el.Rev()}
	release := func() {
		if s.Err() == nil {
			rctx, rcancel := context.WithTimeout(context.Background(), s.ttl)
			_ = el.Resign(rctx) // best effort: the key goes with the lease anyway
			rcancel()
		}
		cs.Orphan()
		stop()
		cancel()
	}
	return l, release, nil
}

// run is the leader loop; see RunLeader.
func (l *leader) run(ctx context.Context) error {
	for {
		rev, err := l.load(ctx)
		if err == nil {
			err = l.follow(ctx, rev)
		}
		// Stop when deposed or ended; reload after a broken watch or a
		// transient store error.
		if errors.Is(err, ErrNotLeader) || l.s.Err() != nil || ctx.Err() != nil {
			return l.exitErr(ctx, err)
		}
		if !sleepCtx(ctx, watchRetry) {
			return ctx.Err()
		}
	}
}

// errWatchBroken makes run reload its state and watch again; so does any
// other error but ErrNotLeader.
var errWatchBroken = errors.New("watch broken")

// exitErr prefers the session's or ctx's reason over a store error.
func (l *leader) exitErr(ctx context.Context, err error) error {
	if serr := l.s.Err(); serr != nil {
		return fmt.Errorf("leader %s: %w", l.s.record.ID, serr)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// load reads members, connectors, lastseen keys and the published
// assignment in one transaction (one revision), and returns that revision.
func (l *leader) load(ctx context.Context) (int64, error) {
	c := l.c
	resp, err := c.etcd.Txn(ctx).Then(
		clientv3.OpGet(c.key("members/"), clientv3.WithPrefix()),
		clientv3.OpGet(c.key("connectors/"), clientv3.WithPrefix()),
		clientv3.OpGet(c.key("lastseen/"), clientv3.WithPrefix()),
		clientv3.OpGet(c.key("assignment")),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("leader: load state: %w", err)
	}
	l.members = map[string]MemberRecord{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		r, err := decodeMember(kv.Value, kv.Lease)
		if err != nil {
			return 0, fmt.Errorf("leader: member %s: %w", kv.Key, err)
		}
		l.members[r.ID] = r
	}
	l.connectors = map[string]*kvPair{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		l.connectors[string(kv.Key)] = &kvPair{key: string(kv.Key), value: kv.Value}
	}
	l.lastSeen = map[string]time.Time{}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		t, err := time.Parse(time.RFC3339Nano, string(kv.Value))
		if err != nil {
			continue // unreadable: treated as unknown below
		}
		l.lastSeen[strings.TrimPrefix(string(kv.Key), c.key("lastseen/"))] = t
	}
	l.published = Published{}
	if kvs := resp.Responses[3].GetResponseRange().Kvs; len(kvs) == 1 {
		if l.published, err = decodePublished(kvs[0].Value); err != nil {
			return 0, fmt.Errorf("leader: %w", err)
		}
	}
	// Members that hold jobs but left while no one was leader: seen now.
	now := l.clock()
	for _, id := range owners(l.published.Assignment) {
		if _, live := l.members[id]; live {
			continue
		}
		if _, ok := l.lastSeen[id]; !ok {
			if err := l.markDeparted(ctx, id, now); err != nil {
				return 0, err
			}
		}
	}
	return resp.Header.Revision, nil
}

// follow watches from rev+1 and republishes on every change until an error.
func (l *leader) follow(ctx context.Context, rev int64) error {
	c := l.c
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.s.ctx))
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	memberCh := c.etcd.Watch(wctx, c.key("members/"), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	connCh := c.etcd.Watch(wctx, c.key("connectors/"), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	leaderCh := c.etcd.Watch(wctx, l.key, clientv3.WithRev(rev+1))
	timer := time.NewTimer(0) // compute once at once
	defer timer.Stop()
	for {
		select {
		case <-wctx.Done():
			return wctx.Err()
		case wr, ok := <-memberCh:
			if !ok || wr.Err() != nil {
				return errWatchBroken
			}
			for _, ev := range wr.Events {
				id := strings.TrimPrefix(string(ev.Kv.Key), c.key("members/"))
				if ev.Type == clientv3.EventTypeDelete {
					delete(l.members, id)
					if err := l.markDeparted(ctx, id, l.clock()); err != nil {
						return err
					}
					continue
				}
				r, err := decodeMember(ev.Kv.Value, ev.Kv.Lease)
				if err != nil {
					continue // not a member record; ignore it
				}
				l.members[r.ID] = r
				if _, ok := l.lastSeen[r.ID]; ok {
					if err := l.forget(ctx, r.ID); err != nil {
						return err
					}
				}
			}
		case wr, ok := <-connCh:
			if !ok || wr.Err() != nil {
				return errWatchBroken
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					delete(l.connectors, string(ev.Kv.Key))
				} else {
					l.connectors[string(ev.Kv.Key)] = &kvPair{key: string(ev.Kv.Key), value: ev.Kv.Value}
				}
			}
		case wr, ok := <-leaderCh:
			if !ok || wr.Err() != nil {
				return errWatchBroken
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return fmt.Errorf("leader %s: election key %s deleted: %w", l.s.record.ID, l.key, ErrNotLeader)
				}
			}
			continue
		case <-timer.C:
		}
		next, err := l.reconcile(ctx)
		if errors.Is(err, ErrNotLeader) {
			return err
		}
		if err != nil {
			next = watchRetry // transient store error: try again soon
		}
		timer.Stop()
		if next > 0 {
			timer.Reset(next)
		}
	}
}

// reconcile computes the assignment, publishes it if it changed, prunes
// stale lastseen keys, and returns when to run again for rule 5 (0: only on
// the next change).
func (l *leader) reconcile(ctx context.Context) (time.Duration, error) {
	now := l.clock()
	conns := make([]*kvPair, 0, len(l.connectors))
	for _, kv := range l.connectors {
		conns = append(conns, kv)
	}
	connectors, err := assignConnectors(conns)
	if err != nil {
		return 0, fmt.Errorf("leader: %w", err)
	}
	ids := make([]string, 0, len(l.members))
	for id := range l.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	in := assign.Input{Connectors: connectors, Previous: l.published.Assignment,
		LastSeen: maps.Clone(l.lastSeen), Now: now, RebalanceDelay: l.c.cfg.RebalanceDelay}
	for _, id := range ids {
		in.Members = append(in.Members, l.members[id].Member())
		in.LastSeen[id] = now
	}
	a := l.c.compute(in)
	if l.published.Generation == 0 || !sameAssignment(a, l.published.Assignment) {
		if err := l.publish(ctx, a); err != nil {
			return 0, err
		}
	}
	var next time.Duration
	for id, seen := range l.lastSeen {
		left := seen.Add(l.c.cfg.RebalanceDelay).Sub(now)
		if left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		if !slices.Contains(owners(l.published.Assignment), id) {
			if err := l.forget(ctx, id); err != nil {
				return 0, err
			}
		}
	}
	return next, nil
}

// publish writes a with generation+1, guarded by our election key.
func (l *leader) publish(ctx context.Context, a assign.Assignment) error {
	p := Published{Generation: l.published.Generation + 1, Leader: l.s.record.ID, Assignment: a}
	v, err := encodePublished(p)
	if err != nil {
		return fmt.Errorf("leader: encode generation %d: %w", p.Generation, err)
	}
	if err := l.guarded(ctx, "publish generation "+fmt.Sprint(p.Generation),
		clientv3.OpPut(l.c.key("assignment"), string(v))); err != nil {
		return err
	}
	l.published = p
	return nil
}

// markDeparted records that member id was last seen live at t.
func (l *leader) markDeparted(ctx context.Context, id string, t time.Time) error {
	if err := l.guarded(ctx, "record departure of "+id,
		clientv3.OpPut(l.c.key("lastseen", id), t.UTC().Format(time.RFC3339Nano))); err != nil {
		return err
	}
	l.lastSeen[id] = t
	return nil
}

// forget deletes member id's lastseen record.
func (l *leader) forget(ctx context.Context, id string) error {
	if err := l.guarded(ctx, "forget departure of "+id, clientv3.OpDelete(l.c.key("lastseen", id))); err != nil {
		return err
	}
	delete(l.lastSeen, id)
	return nil
}

// guarded runs ops in one transaction that succeeds only while our election
// key still has the create revision we won with; otherwise ErrNotLeader.
func (l *leader) guarded(ctx context.Context, what string, ops ...clientv3.Op) error {
	resp, err := l.c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)).
		Then(ops...).
		Commit()
	if err != nil {
		return fmt.Errorf("leader %s: %s: %w", l.s.record.ID, what, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("leader %s: %s: election key %s (revision %d) gone: %w",
			l.s.record.ID, what, l.key, l.rev, ErrNotLeader)
	}
	return nil
}

// owners returns the sorted IDs of members that own jobs in a: members with
// an entry in a.Members and departed members that a.Held keeps jobs for.
func owners(a assign.Assignment) []string {
	ids := slices.Collect(maps.Keys(a.Members))
	for _, id := range a.Held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
