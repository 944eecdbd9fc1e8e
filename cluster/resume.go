package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster/store"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNotResumable wraps the reason Resume cannot take over a lease: it
// expired, or the member record is gone or bound to another lease. The
// caller then joins anew.
var ErrNotResumable = errors.New("session cannot be resumed")

// Resume takes over the session of an earlier run of this agent, whose
// lease ID it persisted: it renews that lease once and, if the server still
// holds it and m's member record is bound to it, rewrites the record (with
// addr and m's declarations, keeping the lease and the record's start
// time) and starts the renewal loop. The member record and every claim
// bound to the lease were never released, so no other member could claim
// the jobs meanwhile, and the assignment's generation does not change.
//
// It returns an error wrapping ErrNotResumable when the lease expired or
// the record is not bound to it (join anew), and another error when the
// store cannot be reached before ctx ends.
func (c *Client) Resume(ctx context.Context, m assign.Member, addr string, lease int64) (*Session, error) {
	if err := store.CheckName("member ID", m.ID); err != nil {
		return nil, err
	}
	id := clientv3.LeaseID(lease)
	sent := time.Now()
	r, err := c.etcd.KeepAliveOnce(ctx, id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && r.TTL <= 0):
		return nil, fmt.Errorf("resume as %s: lease %x expired: %w", m.ID, lease, ErrNotResumable)
	case err != nil:
		return nil, fmt.Errorf("resume as %s: renew lease %x: %w", m.ID, lease, err)
	}
	if d := time.Duration(r.TTL) * time.Second; d != c.cfg.SessionTTL {
		// A lease granted with another session_ttl: its local deadline
		// would be computed from the wrong TTL.
		c.revoke(id)
		return nil, fmt.Errorf("resume as %s: lease %x has a TTL of %s, session_ttl is %s: %w", m.ID, lease, d, c.cfg.SessionTTL, ErrNotResumable)
	}
	key := c.keys.Member(m.ID)
	get, err := c.etcd.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("resume as %s: read %s: %w", m.ID, key, err)
	}
	if len(get.Kvs) != 1 || clientv3.LeaseID(get.Kvs[0].Lease) != id {
		return nil, fmt.Errorf("resume as %s: the member record is not bound to lease %x: %w", m.ID, lease, ErrNotResumable)
	}
	old, err := store.DecodeMember(get.Kvs[0].Value, get.Kvs[0].Lease)
	if err != nil {
		return nil, fmt.Errorf("resume as %s: %w", m.ID, err)
	}
	rec := MemberRecord{ID: m.ID, Protocol: m.Protocol, Connectors: m.Connectors, Tasks: m.Tasks,
		Addr: addr, Started: old.Started, Layout: Layout}
	body, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode member record %s: %w", m.ID, err)
	}
	// Rewrite the record only while it is still the one read, bound to
	// this lease: an agent that joined meanwhile keeps its own.
	resp, err := c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", get.Kvs[0].ModRevision)).
		Then(clientv3.OpPut(key, string(body), clientv3.WithLease(id))).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("resume as %s: write %s: %w", m.ID, key, err)
	}
	if !resp.Succeeded {
		return nil, fmt.Errorf("resume as %s: the member record changed meanwhile: %w", m.ID, ErrNotResumable)
	}
	rec.Lease = lease
	s := c.startSession(rec, id, sent, resp.Header.Revision)
	s.resumed = true
	return s, nil
}
