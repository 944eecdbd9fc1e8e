package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Head is the summary of a publication, <prefix>/pub/head, written in the
// last transaction of every publication: once it shows generation G, every
// share and status bucket of G is stored. It is small (about 200 bytes),
// so an agent may read or watch it for its metrics without reading data
// proportional to the cluster.
type Head struct {
	Generation int64     `json:"generation"` // the latest published generation; 0: none yet
	Leader     string    `json:"leader"`     // member ID of the leader that published it
	Layout     int       `json:"layout"`     // store layout (Layout)
	Members    int       `json:"members"`    // live members in the assignment
	Jobs       int       `json:"jobs"`       // jobs assigned to live members
	Unassigned int       `json:"unassigned"` // jobs no member runs
	Conflicts  int       `json:"conflicts"`  // jobs declared by more than one live member
	Published  time.Time `json:"published"`  // when the leader wrote it (UTC)
}

func decodeHead(b []byte) (Head, error) {
	var h Head
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("decode publication head: %w", err)
	}
	return h, nil
}

// Head returns the head of the latest publication; the zero Head when
// nothing has been published in this layout. It returns a store error or a
// decode error.
func (c *Client) Head(ctx context.Context) (Head, error) {
	resp, err := c.etcd.Get(ctx, c.keys.Head())
	if err != nil {
		return Head{}, fmt.Errorf("read %s: %w", c.keys.Head(), err)
	}
	if len(resp.Kvs) == 0 {
		return Head{}, nil
	}
	h, err := decodeHead(resp.Kvs[0].Value)
	if err != nil {
		return Head{}, fmt.Errorf("read %s: %w", c.keys.Head(), err)
	}
	return h, nil
}

// WatchHead returns a channel that delivers the head of every publication:
// the current one first (if any), then each new generation in increasing
// order, never one twice. A watch broken by a compaction or a lost etcd
// leader is re-established (heads published meanwhile may be skipped; order
// is kept), with jittered backoff. The channel is closed when ctx ends.
func (c *Client) WatchHead(ctx context.Context) <-chan Head {
	out := make(chan Head)
	go func() {
		defer close(out)
		var last int64
		send := func(h Head) bool {
			if h.Generation <= last {
				return true
			}
			select {
			case out <- h:
				last = h.Generation
				return true
			case <-ctx.Done():
				return false
			}
		}
		var cur Head
		c.follow(ctx, []watchSpec{{key: c.keys.Head()}}, followFuncs{
			event: func(_ int, _ string, value []byte, deleted bool) {
				if deleted {
					return
				}
				if h, err := decodeHead(value); err == nil {
					cur = h // else a foreign write; the next publication replaces it
				}
			},
			settled: func() bool { return send(cur) },
		})
	}()
	return out
}
