package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster/store"
	"github.com/berthd/berth/spec"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Publication pacing: after a change of members or workload the leader
// waits until no further change came for settleQuiet, but never more than
// settleMax after the first, then computes and publishes once. A thousand
// agents starting together thus make a few generations, not a thousand
// (Kafka's group.initial.rebalance.delay.ms does the same for a new group).
//
// A new cluster (nothing published yet) waits longer for its members to
// gather, as Kafka's group coordinator delays a new group's first
// rebalance (group.initial.rebalance.delay.ms, 3 s, extended by each join):
// jobs handed to the first few members of a thousand would only move again.
// A store no other member can reach (Config.SoleMember) has nobody to wait
// for.
const (
	settleQuiet      = 100 * time.Millisecond
	settleMax        = time.Second
	settleQuietFirst = time.Second
	settleMaxFirst   = 10 * time.Second
)

// gathering says l leads a new cluster (nothing published yet) that other
// members can join: its first generation waits for them.
func (l *leader) gathering() bool { return l.pub.generation == 0 && !l.c.cfg.SoleMember }

// settle is the publication pacing of l's next generation: how long the
// store must be calm, and the longest wait after its first change.
func (l *leader) settle() (quiet, most time.Duration) {
	if l.gathering() {
		return settleQuietFirst, settleMaxFirst
	}
	return settleQuiet, settleMax
}

// RunLeader campaigns for leadership (the election on <prefix>/leader/, on
// s's lease) and, while leader, keeps the published assignment equal to
// assign.Compute of the live members, the stored connectors and the
// previous assignment (docs/design.md "Assignment rules"). It recomputes
// after changes of members, connectors or groups (paced: 100 ms of calm,
// at most 1 s; for a new cluster's first generation 1 s of calm, at most
// 10 s), and, for rule 5, when a departed member's
// RebalanceDelay runs out. A result that differs from the published one is
// published as generation+1: only the members' shares and status buckets
// that changed are written, then the head, in transactions within etcd's
// limits, each guarded by the leader key (its create revision must still be
// ours), so a deposed leader can never overwrite its successor (doc.go).
//
// LastSeen for rule 5: live members are seen now (clock()); when a member
// record disappears the leader stores <prefix>/lastseen/<id> = clock() (also
// guarded), so a new leader applies the same delay. A member that is named
// in the previous assignment but has neither a record nor a lastseen key
// (it left while there was no leader) counts as seen when this leader took
// over. A lastseen key is deleted when its member returns, or when its delay
// has run out and the member holds no jobs in the published assignment.
//
// The leader reads the whole state once when it takes over (page by page at
// one revision), then follows changes with watches that resume from their
// last revision when they break; only when that revision has been compacted
// does it read everything again.
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
	connectors map[string]connectorDef // by name
	groups     map[string]int64        // group name -> mod revision of its definition
	lastSeen   map[string]time.Time    // departed members only
	jobConn    map[string]string       // job ID -> connector name; nil: to rebuild
	conns      []assign.Connector      // the connectors as assignment needs them; nil: to rebuild
	pub        pubState

	computed time.Duration // how long the last assign.Compute took

	loads atomic.Int64 // full reads of the state (tests check that a broken watch resumes without one)
}

// connectorDef is a stored connector as the leader keeps it.
type connectorDef struct {
	conn assign.Connector
	rev  int64 // mod revision of <prefix>/connectors/<name>
	err  error // the stored value could not be decoded
}

// pubState is what the store holds under <prefix>/pub/ (and the legacy
// key), as this leader last read or wrote it.
type pubState struct {
	generation int64
	leader     string
	assignment assign.Assignment      // the previous assignment, for assign.Input.Previous
	shares     map[string]storedShare // member -> its stored share
	buckets    map[string]string      // status bucket -> its content (bucketContent)
	legacy     bool                   // <prefix>/assignment is stored
	force      bool                   // publish the next result even if it equals the last
}

// storedShare is one member's stored share.
type storedShare struct {
	content shareContent
	valid   bool // stored complete, in one generation, with no stray chunks
	chunks  int  // chunk keys 0 … chunks-1 may exist
}

// run is the leader loop; see RunLeader.
func (l *leader) run(ctx context.Context) error {
	b := newBackoff()
	for {
		rev, err := l.load(ctx)
		if err == nil {
			b.Reset()
			err = l.follow(ctx, rev)
		}
		// Stop when deposed or ended; read everything again after a
		// compaction, a publication cut short, or a transient store error.
		if errors.Is(err, ErrNotLeader) || l.s.Err() != nil || ctx.Err() != nil {
			return l.exitErr(ctx, err)
		}
		if !pause(ctx, b) {
			return ctx.Err()
		}
	}
}

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

// load reads members, connectors, groups, lastseen keys and the
// publication, page by page at one revision, and returns that revision.
func (l *leader) load(ctx context.Context) (int64, error) {
	l.loads.Add(1)
	for {
		rev, err := l.loadOnce(ctx)
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue // compacted while paging: read at a newer revision
		}
		return rev, err
	}
}

func (l *leader) loadOnce(ctx context.Context) (int64, error) {
	c := l.c
	members := map[string]MemberRecord{}
	rev, err := store.RangePages(ctx, c.etcd, c.keys.MembersDir(), 0, store.LeaderPageBytes, func(kv *mvccpb.KeyValue) error {
		r, err := store.DecodeMember(kv.Value, kv.Lease)
		if err != nil {
			return fmt.Errorf("member %s: %w", kv.Key, err)
		}
		members[r.ID] = r
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("leader: load members: %w", err)
	}
	// The other directories at the same revision, side by side (a new
	// leader's read is on the path from a lost leader to a new generation).
	connectors, groups := map[string]connectorDef{}, map[string]int64{}
	lastSeen := map[string]time.Time{}
	sn := newSnapshot()
	reads := []struct {
		what, prefix string
		fn           func(*mvccpb.KeyValue) error
	}{
		{"connectors", c.keys.DefDir(spec.DefConnector), func(kv *mvccpb.KeyValue) error {
			connectors[strings.TrimPrefix(string(kv.Key), c.keys.DefDir(spec.DefConnector))] = decodeConnectorDef(kv)
			return nil
		}},
		{"groups", c.keys.DefDir(spec.DefGroup), func(kv *mvccpb.KeyValue) error {
			groups[strings.TrimPrefix(string(kv.Key), c.keys.DefDir(spec.DefGroup))] = kv.ModRevision
			return nil
		}},
		{"lastseen", c.keys.LastSeenDir(), func(kv *mvccpb.KeyValue) error {
			if t, err := time.Parse(time.RFC3339Nano, string(kv.Value)); err == nil {
				lastSeen[strings.TrimPrefix(string(kv.Key), c.keys.LastSeenDir())] = t
			} // unreadable: treated as unknown below
			return nil
		}},
		{"publication", c.keys.PubDir(), func(kv *mvccpb.KeyValue) error { return sn.add(c, kv) }},
	}
	errs := make([]error, len(reads)+1)
	var wg sync.WaitGroup
	for i, r := range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := store.RangePages(ctx, c.etcd, r.prefix, rev, store.LeaderPageBytes, r.fn); err != nil {
				errs[i] = fmt.Errorf("leader: load %s: %w", r.what, err)
			}
		}()
	}
	resp, err := c.etcd.Get(ctx, c.keys.Legacy(), clientv3.WithRev(rev))
	wg.Wait()
	if err != nil {
		errs[len(reads)] = fmt.Errorf("leader: load %s: %w", c.keys.Legacy(), err)
	} else {
		for _, kv := range resp.Kvs {
			if err := sn.add(c, kv); err != nil {
				errs[len(reads)] = fmt.Errorf("leader: %w", err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	l.members, l.connectors, l.groups, l.lastSeen = members, connectors, groups, lastSeen
	l.jobConn, l.conns = nil, nil
	l.pub = pubStateOf(sn)
	// Members that hold jobs but left while no one was leader: seen now.
	now := l.clock()
	for _, id := range owners(l.pub.assignment) {
		if _, live := l.members[id]; live {
			continue
		}
		if _, ok := l.lastSeen[id]; !ok {
			if err := l.markDeparted(ctx, id, now); err != nil {
				return 0, err
			}
		}
	}
	return rev, nil
}

// pubStateOf is the publication state a snapshot shows.
func pubStateOf(sn *snapshot) pubState {
	prev := sn.published()
	ps := pubState{generation: prev.Generation, leader: prev.Leader, assignment: prev.Assignment,
		shares: map[string]storedShare{}, buckets: map[string]string{}, legacy: sn.legacy != nil,
		// Nothing published yet, or a publication cut short (the head
		// behind its shares): publish the next result whatever it is.
		force: sn.maxGen == 0 || !sn.complete()}
	for member, cs := range sn.shares {
		st := storedShare{}
		for i := range cs {
			st.chunks = max(st.chunks, i+1)
		}
		if s, ok := cs.assemble(member); ok && len(cs) == st.chunks && st.chunks == cs[0].Chunks {
			st.valid = true
			st.content = shareContent{jobs: s.Jobs, connectors: s.Connectors, groups: s.Groups, departed: s.Departed}
		}
		ps.shares[member] = st
	}
	for name, b := range sn.buckets {
		ps.buckets[name], _ = bucketContent(b)
	}
	if sn.legacyAhead() {
		// A leader of the single-key layout published last: its agents
		// follow that value, ours follow the shares. Rewrite every share and
		// bucket at a newer generation so that all agents agree again.
		for m, st := range ps.shares {
			st.valid = false
			ps.shares[m] = st
		}
		for name := range ps.buckets {
			ps.buckets[name] = "\x00stale"
		}
		ps.force = true
	}
	return ps
}

// putConnector records a stored connector definition.
func (l *leader) putConnector(kv *mvccpb.KeyValue) {
	l.connectors[strings.TrimPrefix(string(kv.Key), l.c.keys.DefDir(spec.DefConnector))] = decodeConnectorDef(kv)
	l.jobConn, l.conns = nil, nil
}

// decodeConnectorDef is a stored connector as the leader keeps it.
func decodeConnectorDef(kv *mvccpb.KeyValue) connectorDef {
	def := connectorDef{rev: kv.ModRevision}
	var d store.DefRecord
	if err := json.Unmarshal(kv.Value, &d); err != nil || d.Connector == nil {
		def.err = fmt.Errorf("decode connector %s: %v", kv.Key, err)
	} else {
		def.conn = *d.Connector
	}
	return def
}

// watch is one of the leader's watches, resumable from next.
type watch struct {
	key    string
	prefix bool
	next   int64
}

// errCompacted makes run read the whole state again.
var errCompacted = errors.New("watched revision compacted")

// follow watches members, connectors, groups and our election key from
// rev+1 and republishes after changes, until deposed, ended, or a watch
// needs history that has been compacted (then run reads everything again).
// A watch broken otherwise (a lost etcd leader) resumes from its next
// revision with nothing read again.
func (l *leader) follow(ctx context.Context, rev int64) error {
	c := l.c
	ws := []*watch{
		{key: c.keys.MembersDir(), prefix: true, next: rev + 1},
		{key: c.keys.DefDir(spec.DefConnector), prefix: true, next: rev + 1},
		{key: c.keys.DefDir(spec.DefGroup), prefix: true, next: rev + 1},
		{key: l.key, next: rev + 1},
	}
	timer := time.NewTimer(0) // compute once at once …
	defer timer.Stop()
	var dirtySince time.Time // first change not yet published; zero: none
	var rule5 time.Time      // when a rule 5 hold runs out; zero: none
	if l.gathering() {
		dirtySince = time.Now() // … unless the cluster is new: let members gather
		timer.Reset(settleQuietFirst)
	}
	b := newBackoff()
	for {
		err := l.followWatches(ctx, ws, timer, &dirtySince, &rule5)
		if !errors.Is(err, errWatchLost) {
			return err
		}
		if !pause(ctx, b) {
			return ctx.Err()
		}
	}
}

// followWatches runs the watches until one breaks (errWatchLost) or an
// error ends the leadership or asks for a full read.
func (l *leader) followWatches(ctx context.Context, ws []*watch, timer *time.Timer, dirtySince, rule5 *time.Time) error {
	c := l.c
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.s.ctx))
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	chans := make([]clientv3.WatchChan, len(ws))
	for i, w := range ws {
		opts := []clientv3.OpOption{clientv3.WithRev(w.next), clientv3.WithProgressNotify()}
		if w.prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		chans[i] = c.etcd.Watch(wctx, w.key, opts...)
	}
	merged, wait := fanIn(wctx, chans)
	defer wait()
	defer cancel()
	changed := func() {
		now := time.Now()
		if dirtySince.IsZero() {
			*dirtySince = now
		}
		quiet, most := l.settle()
		due := now.Add(quiet)
		if limit := dirtySince.Add(most); limit.Before(due) {
			due = limit
		}
		if !rule5.IsZero() && rule5.Before(due) {
			due = *rule5
		}
		timer.Reset(max(0, time.Until(due)))
	}
	for {
		select {
		case <-wctx.Done():
			return wctx.Err()
		case ir, ok := <-merged:
			if !ok {
				return errWatchLost
			}
			wr, w := ir.wr, ws[ir.i]
			if wr.CompactRevision != 0 {
				return fmt.Errorf("leader: watch %s from revision %d: %w", w.key, w.next, errCompacted)
			}
			if wr.Err() != nil || wr.Canceled {
				return errWatchLost
			}
			if wr.IsProgressNotify() {
				w.next = max(w.next, wr.Header.Revision+1)
				continue
			}
			for _, ev := range wr.Events {
				w.next = max(w.next, ev.Kv.ModRevision+1)
				if err := l.apply(ctx, ir.i, ev); err != nil {
					return err
				}
			}
			if ir.i != 3 && len(wr.Events) > 0 {
				changed()
			}
		case <-timer.C:
			next, err := l.reconcile(ctx)
			if err != nil {
				return err
			}
			*dirtySince = time.Time{}
			*rule5 = time.Time{}
			if next > 0 {
				*rule5 = time.Now().Add(next)
				timer.Reset(next)
			}
		}
	}
}

// apply takes one event of watch i (0 members, 1 connectors, 2 groups, 3
// our election key) into the leader's state.
func (l *leader) apply(ctx context.Context, i int, ev *clientv3.Event) error {
	c := l.c
	del := ev.Type == clientv3.EventTypeDelete
	switch i {
	case 0:
		id := strings.TrimPrefix(string(ev.Kv.Key), c.keys.MembersDir())
		if del {
			delete(l.members, id)
			return l.markDeparted(ctx, id, l.clock())
		}
		r, err := store.DecodeMember(ev.Kv.Value, ev.Kv.Lease)
		if err != nil {
			return nil // not a member record; ignore it
		}
		l.members[r.ID] = r
		if _, ok := l.lastSeen[r.ID]; ok {
			return l.forget(ctx, r.ID)
		}
	case 1:
		if del {
			delete(l.connectors, strings.TrimPrefix(string(ev.Kv.Key), c.keys.DefDir(spec.DefConnector)))
			l.jobConn, l.conns = nil, nil
		} else {
			l.putConnector(ev.Kv)
		}
	case 2:
		name := strings.TrimPrefix(string(ev.Kv.Key), c.keys.DefDir(spec.DefGroup))
		if del {
			delete(l.groups, name)
		} else {
			l.groups[name] = ev.Kv.ModRevision
		}
	case 3:
		if del {
			return fmt.Errorf("leader %s: election key %s deleted: %w", l.s.record.ID, l.key, ErrNotLeader)
		}
	}
	return nil
}

// assignConnectors returns the connectors as assignment needs them, sorted
// by name, or the first decode error.
func (l *leader) assignConnectors() ([]assign.Connector, error) {
	if l.conns != nil {
		return l.conns, nil
	}
	names := slices.Sorted(maps.Keys(l.connectors))
	out := make([]assign.Connector, 0, len(names))
	for _, n := range names {
		d := l.connectors[n]
		if d.err != nil {
			return nil, d.err
		}
		out = append(out, d.conn)
	}
	l.conns = out
	return out, nil
}

// jobConnectors maps every job ID of the workload to its connector's name.
func (l *leader) jobConnectors() map[string]string {
	if l.jobConn != nil {
		return l.jobConn
	}
	conns, _ := l.assignConnectors()
	jobs := assign.Jobs(conns)
	l.jobConn = make(map[string]string, len(jobs))
	for _, j := range jobs {
		l.jobConn[j.ID] = j.Connector
	}
	return l.jobConn
}

// reconcile computes the assignment, publishes it if it changed, prunes
// stale lastseen keys, and returns when to run again for rule 5 (0: only on
// the next change). A store error while publishing is returned as is: the
// caller reads the state again before the next publication.
func (l *leader) reconcile(ctx context.Context) (time.Duration, error) {
	now := l.clock()
	connectors, err := l.assignConnectors()
	if err != nil {
		return 0, fmt.Errorf("leader: %w", err) // a foreign write (PutConnector validates): read again later
	}
	ids := make([]string, 0, len(l.members))
	for id := range l.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	in := assign.Input{Connectors: connectors, Previous: l.pub.assignment,
		LastSeen: maps.Clone(l.lastSeen), Now: now, RebalanceDelay: l.c.cfg.RebalanceDelay}
	for _, id := range ids {
		in.Members = append(in.Members, l.members[id].Member())
		in.LastSeen[id] = now
	}
	t := time.Now()
	a := l.c.compute(in)
	l.computed = time.Since(t)
	if err := l.publish(ctx, a); err != nil {
		return 0, err
	}
	var next time.Duration
	own := owners(l.pub.assignment)
	for id, seen := range l.lastSeen {
		left := seen.Add(l.c.cfg.RebalanceDelay).Sub(now)
		if left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		if _, found := slices.BinarySearch(own, id); !found {
			if err := l.forget(ctx, id); err != nil {
				return 0, err
			}
		}
	}
	return next, nil
}

// markDeparted records that member id was last seen live at t.
func (l *leader) markDeparted(ctx context.Context, id string, t time.Time) error {
	if err := l.guarded(ctx, "record departure of "+id,
		clientv3.OpPut(l.c.keys.LastSeen(id), t.UTC().Format(time.RFC3339Nano))); err != nil {
		return err
	}
	l.lastSeen[id] = t
	return nil
}

// forget deletes member id's lastseen record.
func (l *leader) forget(ctx context.Context, id string) error {
	if err := l.guarded(ctx, "forget departure of "+id, clientv3.OpDelete(l.c.keys.LastSeen(id))); err != nil {
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
