package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berthd/berth/cluster/store"
)

// Claim takes job's claim for this member: <prefix>/claims/<job> = member
// ID, created only if absent and bound to the session's lease, so it
// vanishes with the lease (docs/design.md: an agent claims a job before it starts
// it). ok is true when the claim is now ours (also when it already was);
// otherwise holder names the member that holds it. It returns an error when
// job is not a valid key segment, the session has ended, or the store fails.
func (s *Session) Claim(ctx context.Context, job string) (ok bool, holder string, err error) {
	if err := store.CheckName("job", job); err != nil {
		return false, "", err
	}
	if err := s.Err(); err != nil {
		return false, "", fmt.Errorf("claim %s: %w", job, err)
	}
	key := s.c.keys.Claim(job)
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
	if err := store.CheckName("job", job); err != nil {
		return err
	}
	key := s.c.keys.Claim(job)
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

// ClaimMany takes the claims of jobs for this member, each exactly as Claim
// does (create-if-absent, bound to the session's lease), in as few
// transactions as etcd's limits allow: every claim is a nested transaction,
// so one claim held by another member does not fail the others, and one
// request carries up to MaxTxnOps−3 claims (125 by default: claimsPerTxn). won lists the
// jobs whose claims are now ours (also those that already were), in the
// order given; held maps every other job to the member that holds it
// (another member, or an earlier session of ours whose lease has not yet
// expired). Duplicate jobs count once.
//
// It returns an error, with the results of the transactions that did
// commit, when a job is not a valid key segment (before any write), the
// session has ended, or the store fails; a job in neither result may then
// be claimed or not: claim it again. ClaimRuns does the same and says at
// which revision each claim was written.
func (s *Session) ClaimMany(ctx context.Context, jobs []string) (won []string, held map[string]string, err error) {
	claimed, held, err := s.ClaimRuns(ctx, jobs, nil)
	for _, c := range claimed {
		won = append(won, c.Job)
	}
	return won, held, err
}

// Claimed is one claim this session holds, as ClaimRuns or RenewClaim
// took it: what a fencing token is made of (docs/fencing.md).
type Claimed struct {
	// Job is the job's ID.
	Job string
	// Revision is the store revision of this call's write of the claim:
	// the transaction that created it, or re-put it (RenewClaim, or
	// ClaimRuns for a job renew names), which is the claim key's
	// mod_revision. It is greater than the revision of every earlier
	// write of the key, and so than every token an earlier run of the job
	// got from it, on any member. 0: the claim already was ours and was
	// not written.
	Revision int64
	// Created is the claim key's create_revision: every run under this
	// claim got a token of at least Created; a run with a smaller one ran
	// under an earlier claim.
	Created int64
	// Seen is the highest store revision this session had seen before
	// the write (Session.Seen): in a store that never goes back, Revision
	// is greater.
	Seen int64
}

// ClaimRuns is ClaimMany, saying of each claim won at which revision it was
// written (Claimed). A claim that already was ours (a resumed session's)
// is re-put, the same value on the same lease, when renew (nil: never)
// says so for its job, so that the job's next run gets a revision of its
// own; otherwise it is only read. A put of a claim is guarded as
// RenewClaim's is (our member ID on our lease), all in the one
// transaction per batch, whose revision is every put's.
func (s *Session) ClaimRuns(ctx context.Context, jobs []string, renew func(job string) bool) (won []Claimed, held map[string]string, err error) {
	jobs, err = uniqueNames("job", jobs)
	if err != nil {
		return nil, nil, err
	}
	held = map[string]string{}
	per := claimsPerTxn(s.c.cfg.MaxTxnOps)
	// A claim only to be read that is ours already (a resumed session's,
	// at an adoption of thousands of runs: all of them) is found by a
	// read-only transaction, which etcd answers without a raft proposal
	// or a disk sync; a write transaction of every batch cost both. The
	// others are claimed as below.
	if ours, err := s.readOwnClaims(ctx, jobs, renew); err == nil && len(ours) > 0 {
		won = ours
		mine := make(map[string]bool, len(ours))
		for _, c := range ours {
			mine[c.Job] = true
		}
		rest := make([]string, 0, len(jobs)-len(ours))
		for _, j := range jobs {
			if !mine[j] {
				rest = append(rest, j)
			}
		}
		jobs = rest
	}
	for start := 0; start < len(jobs); start += per {
		if err := s.Err(); err != nil {
			return won, held, fmt.Errorf("claim %d jobs: %w", len(jobs)-start, err)
		}
		part := jobs[start:min(start+per, len(jobs))]
		ops := make([]sizedOp, len(part))
		for i, j := range part {
			ops[i] = s.claimOp(j, renew != nil && renew(j))
		}
		done := 0
		for _, txn := range s.c.pack(ops, per) {
			seen := s.Seen()
			resp, err := s.c.etcd.Txn(ctx).Then(txn...).Commit()
			if err != nil {
				return won, held, fmt.Errorf("claim %d jobs (%s …): %w", len(txn), part[done], err)
			}
			s.saw(resp.Header)
			rev := resp.Header.Revision
			for i, r := range resp.Responses {
				job := part[done+i]
				c, holder, err := s.claimed(job, r.GetResponseTxn(), rev)
				switch {
				case err != nil:
					return won, held, err
				case holder != "":
					held[job] = holder
				default:
					c.Seen = seen
					won = append(won, c)
				}
			}
			done += len(txn)
		}
	}
	return won, held, nil
}

// readOwnClaims reads the claims of jobs that renew (nil: never) does
// not name, with read-only transactions of up to claimsPerTxn gets each,
// and returns those that are this session's (our member ID on our
// lease), each with the key's create_revision and Revision 0 (not
// written), as ClaimRuns reports a claim it only read; none for a
// session that was not resumed (Client.Resume). Errors: the
// session has ended or the store fails; ClaimRuns then claims them all
// by its write transactions.
func (s *Session) readOwnClaims(ctx context.Context, jobs []string, renew func(job string) bool) ([]Claimed, error) {
	if !s.resumed {
		return nil, nil // a new lease holds no claim yet
	}
	var read []string
	for _, j := range jobs {
		if renew == nil || !renew(j) {
			read = append(read, j)
		}
	}
	var out []Claimed
	per := claimsPerTxn(s.c.cfg.MaxTxnOps)
	for start := 0; start < len(read); start += per {
		if err := s.Err(); err != nil {
			return nil, err
		}
		part := read[start:min(start+per, len(read))]
		ops := make([]clientv3.Op, len(part))
		for i, j := range part {
			ops[i] = clientv3.OpGet(s.c.keys.Claim(j))
		}
		seen := s.Seen()
		resp, err := s.c.etcd.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("read %d claims (%s …): %w", len(part), part[0], err)
		}
		s.saw(resp.Header)
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) == 1 && string(kvs[0].Value) == s.record.ID && clientv3.LeaseID(kvs[0].Lease) == s.lease {
				out = append(out, Claimed{Job: part[i], Created: kvs[0].CreateRevision, Seen: seen})
			}
		}
	}
	return out, nil
}

// claimsPerTxn is how many claims one request carries within etcd's
// --max-txn-ops (maxOps): etcd counts a nested transaction against what its
// parent leaves (server/etcdserver/api/v3rpc/key.go checkTxnRequest: a
// nested request's budget is the limit less its parent's widest branch),
// and a renewing claim (claimOp) is three levels deep, its innermost
// branch two compares wide: k claims leave 1 for the claim's level and
// maxOps − k − 1 ≥ 2 for the renewal's, so k ≤ maxOps − 3 (125 by default).
func claimsPerTxn(maxOps int) int { return maxOps - 3 }

// claimOp is the nested transaction of job's claim: create it if absent;
// else, with renew, re-put it if it is ours (renewOps), else read it.
func (s *Session) claimOp(job string, renew bool) sizedOp {
	key := s.c.keys.Claim(job)
	absent := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}
	create := []clientv3.Op{clientv3.OpPut(key, s.record.ID, clientv3.WithLease(s.lease))}
	size := 3*len(key) + len(s.record.ID) + opOverhead
	if !renew {
		return sizedOp{size: size, op: clientv3.OpTxn(absent, create, []clientv3.Op{clientv3.OpGet(key)})}
	}
	ours, put, other := s.renewOps(key)
	return sizedOp{size: 2*size + len(s.record.ID) + opOverhead,
		op: clientv3.OpTxn(absent, create, []clientv3.Op{clientv3.OpTxn(ours, put, other)})}
}

// renewOps are the parts of a guarded re-put of claim key: if its value
// is our member ID and it is bound to our lease, put the same on the same
// lease (reading the previous key for its create_revision); else read it.
func (s *Session) renewOps(key string) (ours []clientv3.Cmp, put, other []clientv3.Op) {
	return []clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", s.record.ID),
			clientv3.Compare(clientv3.LeaseValue(key), "=", int64(s.lease))},
		[]clientv3.Op{clientv3.OpPut(key, s.record.ID, clientv3.WithLease(s.lease), clientv3.WithPrevKV())},
		[]clientv3.Op{clientv3.OpGet(key)}
}

// claimed reads the answer tr of job's nested claim transaction (claimOp)
// in a transaction of revision rev: the claim ours, or the member that
// holds it. It returns an error when the claim vanished inside the
// transaction (which cannot happen).
func (s *Session) claimed(job string, tr *etcdserverpb.TxnResponse, rev int64) (c Claimed, holder string, err error) {
	c.Job = job
	if tr.Succeeded { // created here
		c.Revision, c.Created = rev, rev
		return c, "", nil
	}
	r := tr.Responses[0]
	if inner := r.GetResponseTxn(); inner != nil { // the renew branch
		if inner.Succeeded {
			c.Revision = rev
			if prev := inner.Responses[0].GetResponsePut().GetPrevKv(); prev != nil {
				c.Created = prev.CreateRevision
			}
			return c, "", nil
		}
		r = inner.Responses[0]
	}
	kvs := r.GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return c, "", fmt.Errorf("claim %s: claim vanished inside a transaction", job)
	}
	if string(kvs[0].Value) == s.record.ID && clientv3.LeaseID(kvs[0].Lease) == s.lease {
		c.Created = kvs[0].CreateRevision
		return c, "", nil
	}
	return c, string(kvs[0].Value), nil
}

// ErrClaimLost is the error of RenewClaim when the job's claim is not this
// session's: gone (the lease expired or was revoked) or another member's.
var ErrClaimLost = errors.New("the claim is not this session's")

// RenewClaim re-puts job's claim, the same value on the same lease, only
// while it is this session's (our member ID on our lease), and returns at
// which revision (Claimed): the fencing token of the job's next run under
// the claim it already holds (a restart by its restart policy). It
// returns an error wrapping ErrClaimLost when the claim is not ours, and
// another when job is not a valid key segment, the session has ended or
// the store fails.
func (s *Session) RenewClaim(ctx context.Context, job string) (Claimed, error) {
	if err := store.CheckName("job", job); err != nil {
		return Claimed{}, err
	}
	if err := s.Err(); err != nil {
		return Claimed{}, fmt.Errorf("renew claim %s: %w", job, err)
	}
	key := s.c.keys.Claim(job)
	ours, put, other := s.renewOps(key)
	seen := s.Seen()
	resp, err := s.c.etcd.Txn(ctx).If(ours...).Then(put...).Else(other...).Commit()
	if err != nil {
		return Claimed{}, fmt.Errorf("renew claim %s at %s: %w", job, key, err)
	}
	s.saw(resp.Header)
	if !resp.Succeeded {
		holder := "nobody"
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			holder = fmt.Sprintf("%s on lease %x", kvs[0].Value, kvs[0].Lease)
		}
		return Claimed{}, fmt.Errorf("renew claim %s: held by %s: %w", job, holder, ErrClaimLost)
	}
	c := Claimed{Job: job, Revision: resp.Header.Revision, Seen: seen}
	if prev := resp.Responses[0].GetResponsePut().GetPrevKv(); prev != nil {
		c.Created = prev.CreateRevision
	}
	return c, nil
}

// ReleaseMany gives up the claims of jobs that this session holds, each
// exactly as Release does (deleted only when its value is our member ID and
// it is bound to our lease), in as few transactions as etcd's limits allow
// (up to MaxTxnOps−2 releases each). Jobs whose claims we do not hold are
// left alone. It returns an error when a job is not a valid key segment
// (before any write) or the store fails; releases of the transactions that
// committed stand.
func (s *Session) ReleaseMany(ctx context.Context, jobs []string) error {
	jobs, err := uniqueNames("job", jobs)
	if err != nil {
		return err
	}
	per := s.c.cfg.MaxTxnOps - 2
	ops := make([]sizedOp, len(jobs))
	for i, j := range jobs {
		key := s.c.keys.Claim(j)
		ops[i] = sizedOp{size: 3*len(key) + len(s.record.ID) + opOverhead,
			op: clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", s.record.ID),
					clientv3.Compare(clientv3.LeaseValue(key), "=", int64(s.lease))},
				[]clientv3.Op{clientv3.OpDelete(key)}, nil)}
	}
	done := 0
	for _, txn := range s.c.pack(ops, per) {
		if _, err := s.c.etcd.Txn(ctx).Then(txn...).Commit(); err != nil {
			return fmt.Errorf("release %d jobs (%s …): %w", len(txn), jobs[done], err)
		}
		done += len(txn)
	}
	return nil
}

// uniqueNames checks every name is a valid key segment and drops repeats,
// keeping the first occurrence's order.
func uniqueNames(what string, names []string) ([]string, error) {
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if err := store.CheckName(what, n); err != nil {
			return nil, err
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// Holders returns the member ID that holds each claimed job among jobs (an
// unclaimed job is absent), read by key, MaxTxnOps per transaction: who
// runs a connector's tasks right now, without reading every claim. It
// returns an error when a job is not a valid key segment or the store
// fails.
func (c *Client) Holders(ctx context.Context, jobs []string) (map[string]string, error) {
	keys := make([]string, 0, len(jobs))
	for _, j := range jobs {
		if err := store.CheckName("job", j); err != nil {
			return nil, err
		}
		keys = append(keys, c.keys.Claim(j))
	}
	dir := c.keys.ClaimsDir()
	out := map[string]string{}
	if err := store.GetKeys(ctx, c.etcd, c.cfg.MaxTxnOps, keys, func(kv *mvccpb.KeyValue) {
		out[strings.TrimPrefix(string(kv.Key), dir)] = string(kv.Value)
	}); err != nil {
		return nil, fmt.Errorf("read claims: %w", err)
	}
	return out, nil
}

// Claims returns every current claim: job ID -> holder member ID, read
// page by page at one revision (about 80 bytes per job: for tools and
// checks; Holders reads a few).
func (c *Client) Claims(ctx context.Context) (map[string]string, error) {
	dir := c.keys.ClaimsDir()
	out := map[string]string{}
	_, err := store.RangePrefix(ctx, c.etcd, dir, 0, func(kv *mvccpb.KeyValue) error {
		out[strings.TrimPrefix(string(kv.Key), dir)] = string(kv.Value)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list claims under %s: %w", dir, err)
	}
	return out, nil
}

// WaitClaimFree blocks until job has no claim (released, or its holder's
// lease expired) and returns nil, or returns ctx's error when ctx ends first.
// Failed reads and broken watches are retried with jittered backoff. A
// revoked job is claimed by its next member only after this (docs/design.md
// rule 7).
func (c *Client) WaitClaimFree(ctx context.Context, job string) error {
	if err := store.CheckName("job", job); err != nil {
		return err
	}
	key := c.keys.Claim(job)
	b := newBackoff()
	for {
		resp, err := c.etcd.Get(ctx, key)
		if err == nil {
			if len(resp.Kvs) == 0 {
				return nil
			}
			if err = c.waitDelete(ctx, key, resp.Header.Revision+1); err == nil {
				return nil
			}
		}
		if ctx.Err() != nil || !pause(ctx, b) {
			return fmt.Errorf("wait for claim %s to be free: %w (last error: %v)", job, ctx.Err(), err)
		}
	}
}
