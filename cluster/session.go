package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster/store"
	"github.com/berthd/berth/internal/retry"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrSessionClosed is the Err of a session ended by Close (the member left).
var ErrSessionClosed = errors.New("cluster session closed")

// renewRetry paces the attempts after a failed renewal, within the local
// deadline: berth's jittered backoff (internal/retry), 100 ms doubling to
// 1 s, so that agents that lost etcd together do not retry in step.
var renewRetry = retry.Policy{Initial: 100 * time.Millisecond, Max: time.Second}

// Session is one membership of this agent: an etcd lease of Config.SessionTTL
// with the member record bound to it, kept alive by the session's own renewal
// loop (not clientv3's KeepAlive stream) so that it knows when each renewal
// was sent.
//
// Fencing rule (docs/design.md): the server resets a lease's expiry to at least
// TTL after it receives a renewal, which is after the renewal was sent, so it
// cannot expire the lease before LastRenewal()+TTL(). Deadline() is that
// instant minus a margin of max(1 s, TTL/5), leaving time to kill workers.
// Done closes when a renewal is answered "lease not found" or when
// Deadline passes without a successful renewal — always before the server
// can expire the lease. After Done the caller fences and calls Join again
// (a new lease) when etcd is reachable.
type Session struct {
	c      *Client
	record MemberRecord
	lease  clientv3.LeaseID
	ttl    time.Duration
	margin time.Duration

	ctx    context.Context // cancelled when the session ends
	cancel context.CancelFunc
	done   chan struct{}
	loop   chan struct{} // closed when the renewal loop has returned

	mu       sync.Mutex
	lastSent time.Time // send time of the last successful renewal (or grant)
	err      error
	ended    bool
	// seen is the highest store revision the session has seen in an
	// answer (its grant or resume, renewals, claims): see Seen.
	seen int64
	// resumed is set, before the session is handed out, for a session
	// resumed on an earlier agent's lease (Client.Resume): only such a
	// session can hold claims it did not make.
	resumed bool
}

// Join makes this agent a member: it grants a lease of Config.SessionTTL,
// writes m's MemberRecord (with addr, the agent's HTTP listen address) to
// <prefix>/members/<m.ID> bound to it, and starts the renewal loop.
//
// It returns ErrMemberExists (wrapped, naming the holder's address) when a
// live lease already holds that member ID, and other errors when m.ID is not
// a valid key segment or the store cannot be reached before ctx ends.
func (c *Client) Join(ctx context.Context, m assign.Member, addr string) (*Session, error) {
	if err := store.CheckName("member ID", m.ID); err != nil {
		return nil, err
	}
	rec := MemberRecord{ID: m.ID, Protocol: m.Protocol, Connectors: m.Connectors, Tasks: m.Tasks,
		Addr: addr, Started: time.Now().UTC(), Layout: Layout}
	body, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode member record %s: %w", m.ID, err)
	}
	ttl := c.cfg.SessionTTL
	sent := time.Now()
	g, err := c.etcd.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("join as %s: grant lease of %s: %w", m.ID, ttl, err)
	}
	key := c.keys.Member(m.ID)
	resp, err := c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(body), clientv3.WithLease(g.ID))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		c.revoke(g.ID)
		return nil, fmt.Errorf("join as %s: write %s: %w", m.ID, key, err)
	}
	if !resp.Succeeded {
		c.revoke(g.ID)
		holder := "?"
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			if r, err := store.DecodeMember(kvs[0].Value, kvs[0].Lease); err == nil {
				holder = fmt.Sprintf("%s (lease %x, started %s)", r.Addr, r.Lease, r.Started.Format(time.RFC3339))
			}
		}
		return nil, fmt.Errorf("join as %s: held by %s: %w", m.ID, holder, ErrMemberExists)
	}
	rec.Lease = int64(g.ID)
	// A slow grant or write (a store that has just come back) can leave
	// little of the TTL before the local deadline: renew once now, so the
	// session does not begin already fenced.
	if time.Until(sent.Add(ttl-FencingMargin(ttl))) < renewInterval(ttl) {
		again := time.Now()
		if r, err := c.etcd.KeepAliveOnce(ctx, g.ID); err != nil || r.TTL <= 0 {
			c.revoke(g.ID)
			return nil, fmt.Errorf("join as %s: renew lease %x after a slow grant: %v: %w", m.ID, int64(g.ID), err, ErrSessionLost)
		}
		sent = again
	}
	return c.startSession(rec, g.ID, sent, resp.Header.Revision), nil
}

// startSession starts the renewal loop of a session whose lease was granted
// (or last renewed) by a request sent at sent; seen is the store revision
// of the answer that made it (its member record's write).
func (c *Client) startSession(rec MemberRecord, lease clientv3.LeaseID, sent time.Time, seen int64) *Session {
	ttl := c.cfg.SessionTTL
	sctx, cancel := context.WithCancel(context.Background())
	s := &Session{c: c, record: rec, lease: lease, ttl: ttl, margin: FencingMargin(ttl),
		ctx: sctx, cancel: cancel, done: make(chan struct{}), loop: make(chan struct{}), lastSent: sent, seen: seen}
	go s.renewLoop()
	return s
}

// FencingMargin is how long before the lease's earliest expiry on the
// server (last renewal sent + ttl) a session's local fencing deadline
// falls: max(1 s, ttl/5), the time left to kill every worker.
func FencingMargin(ttl time.Duration) time.Duration {
	return max(time.Second, ttl/5)
}

func (c *Client) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.SessionTTL)
	defer cancel()
	_, _ = c.etcd.Revoke(ctx, id) // best effort: an unrevoked lease expires after TTL
}

// renewInterval is the time between renewals: a third of the time from a
// renewal's send to the local deadline it sets (TTL − margin), so that about
// three renewals, and their retries, fit before the deadline even when the
// TTL is short (2 s: every 333 ms; 10 s: every 2.7 s).
func renewInterval(ttl time.Duration) time.Duration {
	return (ttl - FencingMargin(ttl)) / 3
}

// renewLoop renews the lease every renewInterval with KeepAliveOnce, each attempt
// bounded by the current Deadline, and ends the session when it cannot.
func (s *Session) renewLoop() {
	defer close(s.loop)
	interval := renewInterval(s.ttl)
	// The first renewal too is due interval after the last one was sent —
	// here the grant, which a store that has just come back may have
	// answered long after it was sent.
	timer := time.NewTimer(max(0, time.Until(s.LastRenewal().Add(interval))))
	defer timer.Stop()
	retries := renewRetry.New()
	for {
		deadline := s.Deadline()
		expire := time.NewTimer(time.Until(deadline))
		select {
		case <-s.ctx.Done():
			expire.Stop()
			return
		case <-expire.C:
			if time.Now().Before(s.Deadline()) {
				continue // RenewNow moved the deadline meanwhile
			}
			s.end(fmt.Errorf("lease %x not renewed before local deadline %s: %w",
				int64(s.lease), deadline.Format(time.RFC3339Nano), ErrSessionLost))
			return
		case <-timer.C:
			expire.Stop()
		}
		rctx, cancel := context.WithDeadline(s.ctx, deadline)
		sent := time.Now()
		resp, err := s.c.etcd.KeepAliveOnce(rctx, s.lease)
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			s.mu.Lock()
			if sent.After(s.lastSent) { // RenewNow may have sent a later one
				s.lastSent = sent
			}
			s.mu.Unlock()
			s.saw(resp.ResponseHeader)
			if f := s.c.cfg.OnRenew; f != nil {
				f(time.Since(sent))
			}
			// The next renewal is due interval after this one was SENT: the
			// deadline counts from the send time, so waiting interval after
			// a slow answer could let it pass before the next renewal.
			timer.Reset(max(0, time.Until(sent.Add(interval))))
			retries.Reset()
		case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.end(fmt.Errorf("lease %x expired on the server: %w", int64(s.lease), ErrSessionLost))
			return
		case s.ctx.Err() != nil:
			return
		case !time.Now().Before(s.Deadline()): // RenewNow may have moved it
			s.end(fmt.Errorf("lease %x not renewed before local deadline %s (last error: %v): %w",
				int64(s.lease), s.Deadline().Format(time.RFC3339Nano), err, ErrSessionLost))
			return
		default:
			timer.Reset(retries.NextBackOff())
		}
	}
}

// RenewNow renews the lease once, at once, outside the renewal loop, and
// returns the new local deadline (TTL − margin after this send). A
// hand-over to a new agent program calls it just before the exec, so that
// the new program has the whole TTL to resume the session.
//
// The attempt is bounded by the session itself: it ends when ctx does or
// when the session ends (lost, which the renewal loop makes happen at the
// local deadline, or closed), whichever comes first; a renewal of the
// loop meanwhile moves that deadline, and the attempt goes on. A renewal that can only arrive after
// the local deadline proves nothing: the workers are being fenced, and
// the lease is about to be revoked. For the same reason an answer that
// arrives after the session ended is not a success (a store that rides
// through a leader change can answer a renewal sent before the session
// was lost, while its lease still lives).
//
// Errors: the session's own (Err: ErrSessionLost or ErrSessionClosed,
// wrapped) when it has ended, before or during the attempt;
// ErrSessionLost when the lease has expired on the server or no answer
// came before the local deadline; ctx's error or the store's otherwise
// (the session goes on as before).
func (s *Session) RenewNow(ctx context.Context) (time.Time, error) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	defer func() { stop(); cancel() }()
	if err := s.Err(); err != nil {
		return time.Time{}, fmt.Errorf("renew lease %x: %w", int64(s.lease), err)
	}
	sent := time.Now()
	resp, err := s.c.etcd.KeepAliveOnce(ctx, s.lease)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil && resp.TTL <= 0:
		return time.Time{}, fmt.Errorf("renew lease %x: %w", int64(s.lease), ErrSessionLost)
	case err != nil && s.Err() != nil:
		return time.Time{}, fmt.Errorf("renew lease %x: %w", int64(s.lease), s.Err())
	case err != nil && !time.Now().Before(s.Deadline()):
		return time.Time{}, fmt.Errorf("renew lease %x: no answer before the local deadline (%v): %w", int64(s.lease), err, ErrSessionLost)
	case err != nil:
		return time.Time{}, fmt.Errorf("renew lease %x: %w", int64(s.lease), err)
	}
	s.mu.Lock()
	ended := s.ended
	if !ended && sent.After(s.lastSent) {
		s.lastSent = sent
	}
	s.mu.Unlock()
	if ended {
		return time.Time{}, fmt.Errorf("renew lease %x: answered after the session ended: %w", int64(s.lease), s.Err())
	}
	s.saw(resp.ResponseHeader)
	return s.Deadline(), nil
}

// saw notes the store revision of an answer's header h (nil: none).
func (s *Session) saw(h *etcdserverpb.ResponseHeader) {
	if h == nil {
		return
	}
	s.mu.Lock()
	s.seen = max(s.seen, h.Revision)
	s.mu.Unlock()
}

// Seen returns the highest store revision the session has seen in an
// answer: its member record's write, every renewal, every claim. Every
// revision the store hands out after Seen returned is greater, unless
// the store went back (its data was lost, or it was restored from an
// older snapshot): fencing tokens compare against it (ClaimRuns).
func (s *Session) Seen() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

// end records why the session ended and closes Done, once.
func (s *Session) end(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.ended, s.err = true, err
	s.cancel()
	close(s.done)
	return true
}

// Done returns a channel closed when the session ends: lost (the lease could
// not be proven live before Deadline, or the server answered that it does
// not exist) or closed by Close. Its workers must then be fenced.
func (s *Session) Done() <-chan struct{} { return s.done }

// Context returns a context that is cancelled when the session ends (as
// Done closes), for bounding a store call by the session's life.
func (s *Session) Context() context.Context { return s.ctx }

// Err returns nil while the session is live, an error wrapping
// ErrSessionLost once it was lost, or ErrSessionClosed after Close.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Deadline returns the local fencing deadline: LastRenewal() + TTL() −
// max(1 s, TTL/5). Done closes no later than (a scheduling delay after) it
// unless a renewal succeeds first.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSent.Add(s.ttl - s.margin)
}

// LastRenewal returns when the last successful renewal (or the lease grant)
// was sent; the server cannot expire the lease before LastRenewal()+TTL().
func (s *Session) LastRenewal() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSent
}

// TTL returns the lease TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Lease returns the etcd lease ID the member record and claims are bound to.
func (s *Session) Lease() clientv3.LeaseID { return s.lease }

// Member returns the record this session registered.
func (s *Session) Member() MemberRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.record
}

// Close leaves the cluster: it stops renewal and revokes the lease, which
// deletes the member record and every claim of this session at once. Done
// closes and Err becomes ErrSessionClosed (unless the session was already
// lost). It returns an error only when the revoke fails; the lease then
// expires by itself within TTL.
//
// Close of a session that was already lost still tries the revoke (it frees
// the claims sooner than expiry would; call it only after fencing) but
// reports no error: the lease is gone or will expire by itself. Close blocks
// at most TTL.
func (s *Session) Close() error {
	live := s.end(ErrSessionClosed)
	<-s.loop
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
	defer cancel()
	_, err := s.c.etcd.Revoke(ctx, s.lease)
	if live && err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("leave as %s: revoke lease %x: %w", s.record.ID, int64(s.lease), err)
	}
	return nil
}
