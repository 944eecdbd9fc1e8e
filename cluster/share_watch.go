package cluster

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/berthd/berth/cluster/store"
)

// Share returns member's current share, and false when it has none (no
// publication named it yet, or its stored chunks are incomplete: a
// publication is under way). It reads only that member's keys. Errors:
// member is not a valid key segment, the store fails, a chunk is not valid
// JSON.
func (c *Client) Share(ctx context.Context, member string) (Share, bool, error) {
	if err := store.CheckName("member ID", member); err != nil {
		return Share{}, false, err
	}
	cs := chunkSet{}
	_, err := store.RangePrefix(ctx, c.etcd, c.keys.ShareDir(member), 0, func(kv *mvccpb.KeyValue) error {
		_, i, ok := c.keys.ParseShareChunk(string(kv.Key))
		if !ok {
			return nil
		}
		ch, err := decodeShareChunk(kv.Value)
		if err != nil {
			return fmt.Errorf("%s: %w", kv.Key, err)
		}
		cs[i] = ch
		return nil
	})
	if err != nil {
		return Share{}, false, fmt.Errorf("read share of %s: %w", member, err)
	}
	s, ok := cs.assemble(member)
	return s, ok, nil
}

// WatchShare returns a channel that delivers member's share: the current
// one first (if it has one), then every change, in increasing generation,
// never one generation twice. Only member's own keys are read and watched
// (<prefix>/pub/shares/<member>/), so what an agent reads per generation is
// proportional to its own jobs; chunks of a share written by several
// transactions are delivered once all are stored. A watch broken by a lost
// etcd leader resumes from the next revision; after a compaction the share
// is read again. Failures are retried with jittered backoff.
//
// In a cluster under upgrade (doc.go, "Upgrade") it also follows the
// single-key layout's <prefix>/assignment: when a leader of that layout has
// published a generation newer than the member's share, the share derived
// from it is delivered (Connectors then lists candidate connector names
// with revision 0, Groups is empty). Values that a leader of this layout
// writes there for old agents are ignored.
//
// The channel is closed when ctx ends. A slow reader holds up delivery; it
// never loses the newest share.
func (c *Client) WatchShare(ctx context.Context, member string) <-chan Share {
	out := make(chan Share)
	go func() {
		defer close(out)
		var last int64
		chunks := chunkSet{}
		var legacy *Share
		c.follow(ctx, []watchSpec{{key: c.keys.ShareDir(member), prefix: true}, {key: c.keys.Legacy()}}, followFuncs{
			reset: func() { chunks, legacy = chunkSet{}, nil },
			event: func(spec int, key string, value []byte, deleted bool) {
				if spec == 1 {
					legacy = nil
					if deleted {
						return
					}
					if p, layout, err := decodeLegacy(value); err == nil && layout < Layout {
						s := legacyShare(member, p)
						legacy = &s
					}
					return
				}
				_, i, ok := c.keys.ParseShareChunk(key)
				if !ok {
					return
				}
				if deleted {
					delete(chunks, i)
					return
				}
				if ch, err := decodeShareChunk(value); err == nil {
					chunks[i] = ch
				}
			},
			settled: func() bool {
				s, ok := chunks.assemble(member)
				if legacy != nil && (!ok || legacy.Generation > s.Generation) {
					s, ok = *legacy, true
				}
				if !ok || s.Generation <= last {
					return true
				}
				select {
				case out <- s:
					last = s.Generation
					return true
				case <-ctx.Done():
					return false
				}
			},
		})
	}()
	return out
}

// taskSuffix matches the "-<n>" of a task job ID.
var taskSuffix = regexp.MustCompile(`-[0-9]+$`)

// legacyShare derives member's share from a single-key layout publication.
// That layout names no definitions: the connector of each job is either
// the job ID (a connector's own job) or the ID less its "-<n>" (a task), so
// both candidates are listed, with revision 0 (unknown).
func legacyShare(member string, p Published) Share {
	s := Share{Member: member, Generation: p.Generation, Leader: p.Leader,
		Jobs: slices.Clone(p.Assignment.Members[member]), Connectors: map[string]int64{}, Groups: map[string]int64{}}
	if s.Jobs == nil {
		s.Jobs = []string{}
		_, live := p.Assignment.Members[member]
		s.Departed = !live
	}
	slices.Sort(s.Jobs)
	for _, j := range s.Jobs {
		s.Connectors[j] = 0
		if loc := taskSuffix.FindStringIndex(j); loc != nil {
			s.Connectors[j[:loc[0]]] = 0
		}
	}
	return s
}

// SharePage is one page of the members' shares, read at one revision.
type SharePage struct {
	Shares []Share // by member ID; complete shares only (not departed ones)
	// Next is the member ID to pass as after for the next page; "" when
	// this page is the last.
	Next string
	// Revision is the store revision the page was read at: pass it to
	// read the next page from the same snapshot.
	Revision int64
}

// SharesPage returns the shares of up to limit members with IDs after
// after ("" from the first), read at revision rev (0: the current one), for
// paged cluster-wide views (/v1/assignment, `berth members`). A share whose
// chunks are incomplete (a publication under way) is left out. It returns
// an error when limit < 1, when the store fails (wrapping
// rpctypes.ErrCompacted when rev has been compacted: start again at 0), or
// when a chunk is not valid JSON.
func (c *Client) SharesPage(ctx context.Context, after string, limit int, rev int64) (SharePage, error) {
	if limit < 1 {
		return SharePage{}, fmt.Errorf("shares page: limit %d: must be at least 1", limit)
	}
	dir := c.keys.SharesDir()
	from := dir
	if after != "" {
		from = dir + after + "0" // '0' follows '/': the first key after after's chunks
	}
	page := SharePage{Revision: rev}
	var cur string
	cs := chunkSet{}
	flush := func() {
		if cur == "" {
			return
		}
		if s, ok := cs.assemble(cur); ok && !s.Departed {
			page.Shares = append(page.Shares, s)
		}
	}
	end := clientv3.GetPrefixRangeEnd(dir)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(store.PageKeysMax)}
		if page.Revision > 0 {
			opts = append(opts, clientv3.WithRev(page.Revision))
		}
		resp, err := c.etcd.Get(ctx, from, opts...)
		if err != nil {
			return SharePage{}, fmt.Errorf("read shares after %q: %w", after, err)
		}
		if page.Revision == 0 {
			page.Revision = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			member, i, ok := c.keys.ParseShareChunk(string(kv.Key))
			if !ok {
				continue
			}
			if member != cur {
				flush()
				if len(page.Shares) >= limit {
					page.Next = page.Shares[len(page.Shares)-1].Member
					return page, nil
				}
				cur, cs = member, chunkSet{}
			}
			ch, err := decodeShareChunk(kv.Value)
			if err != nil {
				return SharePage{}, fmt.Errorf("%s: %w", kv.Key, err)
			}
			cs[i] = ch
		}
		if !resp.More || len(resp.Kvs) == 0 {
			flush()
			return page, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
