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

// claimsPerTxn is how many claims ClaimMany puts in one transaction:
// etcd refuses a transaction of more than --max-txn-ops operations (128 by
// default; etcd's embed.Config MaxTxnOps), and each claim is one nested
// transaction.
const claimsPerTxn = 127

// ClaimMany takes the claims of jobs for this member, each exactly as Claim
// does (create-if-absent, bound to the session's lease), claimsPerTxn per
// transaction: every claim is a nested transaction, so one claim held by
// another member does not fail the others. won lists the jobs whose claims
// are now ours (also those that already were), in the order given; held
// maps every other job to the member that holds it (another member, or an
// earlier session of ours whose lease has not yet expired). Duplicate
// jobs count once.
//
// It returns an error, with the results of the transactions that did
// commit, when a job is not a valid key segment (before any write), the
// session has ended, or the store fails; a job in neither result may then
// be claimed or not: claim it again.
func (s *Session) ClaimMany(ctx context.Context, jobs []string) (won []string, held map[string]string, err error) {
	seen := make(map[string]bool, len(jobs))
	uniq := make([]string, 0, len(jobs))
	for _, j := range jobs {
		if err := checkName("job", j); err != nil {
			return nil, nil, err
		}
		if !seen[j] {
			seen[j] = true
			uniq = append(uniq, j)
		}
	}
	held = map[string]string{}
	for start := 0; start < len(uniq); start += claimsPerTxn {
		if err := s.Err(); err != nil {
			return won, held, fmt.Errorf("claim %d jobs: %w", len(uniq)-start, err)
		}
		part := uniq[start:min(start+claimsPerTxn, len(uniq))]
		ops := make([]clientv3.Op, len(part))
		for i, j := range part {
			key := s.c.key("claims", j)
			ops[i] = clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
				[]clientv3.Op{clientv3.OpPut(key, s.record.ID, clientv3.WithLease(s.lease))},
				[]clientv3.Op{clientv3.OpGet(key)})
		}
		resp, err := s.c.etcd.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return won, held, fmt.Errorf("claim %d jobs (%s …): %w", len(part), part[0], err)
		}
		for i, r := range resp.Responses {
			job := part[i]
			tr := r.GetResponseTxn()
			if tr.Succeeded {
				won = append(won, job)
				continue
			}
			kvs := tr.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 {
				return won, held, fmt.Errorf("claim %s: claim vanished inside a transaction", job)
			}
			if string(kvs[0].Value) == s.record.ID && clientv3.LeaseID(kvs[0].Lease) == s.lease {
				won = append(won, job)
			} else {
				held[job] = string(kvs[0].Value)
			}
		}
	}
	return won, held, nil
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
