package cluster

import (
	clientv3 "go.etcd.io/etcd/client/v3"
)

// opOverhead is what one operation adds to a request beyond its key and
// value, bytes: protobuf tags and lengths, a lease ID, and for a nested
// transaction its compare and its inner operations' framing. Generous on
// purpose: the budget it feeds is an upper bound.
const opOverhead = 48

// sizedOp is an operation with an upper bound of its encoded size.
type sizedOp struct {
	op   clientv3.Op
	size int // bytes
}

func putOp(key, value string, opts ...clientv3.OpOption) sizedOp {
	return sizedOp{op: clientv3.OpPut(key, value, opts...), size: len(key) + len(value) + opOverhead}
}

func deleteOp(key string, opts ...clientv3.OpOption) sizedOp {
	return sizedOp{op: clientv3.OpDelete(key, opts...), size: 2*len(key) + opOverhead}
}

// requestBudget is the most bytes of operations one transaction carries:
// 7/8 of MaxRequestBytes, less room for the guard compare.
func (c *Client) requestBudget() int {
	return c.cfg.MaxRequestBytes/8*7 - 1024
}

// pack splits ops, in order, into transactions of at most maxOps operations
// and requestBudget bytes each. An operation larger than the budget gets a
// transaction of its own (etcd will refuse it; callers keep values under
// the budget).
func (c *Client) pack(ops []sizedOp, maxOps int) [][]clientv3.Op {
	var out [][]clientv3.Op
	var cur []clientv3.Op
	bytes := 0
	budget := c.requestBudget()
	for _, o := range ops {
		if len(cur) > 0 && (len(cur) >= maxOps || bytes+o.size > budget) {
			out = append(out, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, o.op)
		bytes += o.size
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
