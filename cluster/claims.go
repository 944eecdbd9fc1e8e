package cluster

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Claim takes job's claim for this member: <prefix>/claims/<job> = member
// ID, created only if absent and bound to the session's lease, so it
// vanishes with the lease (DESIGN.md: an agent claims a job before it starts
// it). ok is true when the claim is now ours (also when it already was);
// otherwise holder names the member that holds it. It returns an error when
// job is not a valid key segment, the session has ended, or the store fails.
func (s *Session) Claim(ctx context.Context, job string) (ok bool, holder string, err error) {
	if err := checkName("job", job); err != nil {
		return false, "", err
	}
	if err := s.Err(); err != nil {
		return false, "", fmt.Errorf("claim %s: %w", job, err)
	}
	key := s.c.key("claims", job)
	resp, err := s.c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, s.record.ID, clientv3.WithLease(s.lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return false, "", fmt.Errorf("claim %s at %s: %w", job, key, err)
	}
	if resp.Succeeded {
		return true, s.record.ID, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 { // deleted between compare and get cannot happen in one txn
		return false, "", fmt.Errorf("claim %s: claim vanished inside a transaction", job)
	}
	holder = string(kvs[0].Value)
	return holder == s.record.ID && clientv3.LeaseID(kvs[0].Lease) == s.lease, holder, nil
}

// Release gives up job's claim if this session holds it: the key is deleted
// only when its value is our member ID and it is bound to our lease, so a
// late Release never removes a claim another member (or a later session of
// ours) has taken since. Releasing a claim we do not hold does nothing and is
// not an error. It returns an error when the store fails.
func (s *Session) Release(ctx context.Context, job string) error {
	if err := checkName("job", job); err != nil {
		return err
	}
	key := s.c.key("claims", job)
	_, err := s.c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), "=", s.record.ID),
			clientv3.Compare(clientv3.LeaseValue(key), "=", int64(s.lease))).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("release %s at %s: %w", job, key, err)
	}
	return nil
}

// Claims returns every current claim: job ID -> holder member ID.
func (c *Client) Claims(ctx context.Context) (map[string]string, error) {
	dir := c.key("claims/")
	resp, err := c.etcd.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list claims under %s: %w", dir, err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), dir)] = string(kv.Value)
	}
	return out, nil
}

// WaitClaimFree blocks until job has no claim (released, or its holder's
// lease expired) and returns nil, or returns ctx's error when ctx ends first,
// or a store error. A revoked job is claimed by its next member only after
// this (DESIGN.md rule 7).
func (c *Client) WaitClaimFree(ctx context.Context, job string) error {
	if err := checkName("job", job); err != nil {
		return err
	}
	key := c.key("claims", job)
	for {
		resp, err := c.etcd.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("wait for claim %s to be free: %w", job, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := c.etcd.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1))
		freed := false
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					freed = true
				}
			}
			if freed {
				break
			}
		}
		cancel()
		if freed {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("wait for claim %s to be free: %w", job, err)
		}
		// The watch failed (compaction, lost leader): read again.
	}
}
