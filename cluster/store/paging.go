package store

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Paged reads. A range over a directory that grows with the cluster
// (members, shares, claims, connectors) is read a page at a time, every
// page at the revision of the first, so the result is one consistent
// snapshot whatever its size and no single response holds the whole
// directory.
const (
	PageBytes       = 512 * 1024      // aim of one page's size, bytes
	LeaderPageBytes = 2 * 1024 * 1024 // … for a new leader's read of the whole state
	pageKeysMin     = 16              // fewest keys asked for per page
	PageKeysMax     = 5000            // most keys asked for per page
	pageKeysInit    = 256             // keys asked for in the first page
)

// RangePrefix calls fn for every key under prefix, in key order, read at
// revision rev (0: the current revision), and returns the revision it read
// at. Pages adapt their key count so a page is about PageBytes. It returns
// fn's error, or a store error naming prefix; when rev has been compacted
// the error wraps rpctypes.ErrCompacted.
func RangePrefix(ctx context.Context, etcd clientv3.KV, prefix string, rev int64, fn func(*mvccpb.KeyValue) error) (int64, error) {
	return RangePages(ctx, etcd, prefix, rev, PageBytes, fn)
}

// RangePages is RangePrefix with pages of about aim bytes.
func RangePages(ctx context.Context, etcd clientv3.KV, prefix string, rev int64, aim int, fn func(*mvccpb.KeyValue) error) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	limit := int64(pageKeysInit)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := etcd.Get(ctx, from, opts...)
		if err != nil {
			return 0, fmt.Errorf("read %s (revision %d): %w", prefix, rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		size := 0
		for _, kv := range resp.Kvs {
			size += len(kv.Key) + len(kv.Value)
			if err := fn(kv); err != nil {
				return 0, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		if size > 0 {
			limit = min(max(int64(aim)*int64(len(resp.Kvs))/int64(size), pageKeysMin), PageKeysMax)
		}
	}
}

// GetKeys reads the given keys (any number), maxTxnOps reads per
// transaction, and calls fn for each that exists. Different transactions
// may read at different revisions.
func GetKeys(ctx context.Context, etcd clientv3.KV, maxTxnOps int, keys []string, fn func(*mvccpb.KeyValue)) error {
	for start := 0; start < len(keys); start += maxTxnOps {
		part := keys[start:min(start+maxTxnOps, len(keys))]
		ops := make([]clientv3.Op, len(part))
		for i, k := range part {
			ops[i] = clientv3.OpGet(k)
		}
		resp, err := etcd.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("read %d keys (%s …): %w", len(part), part[0], err)
		}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().Kvs {
				fn(kv)
			}
		}
	}
	return nil
}
