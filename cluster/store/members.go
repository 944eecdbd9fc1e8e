package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/spec"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MemberRecord is what an agent registers under <prefix>/members/<id>, bound
// to its session lease: it disappears when the lease ends.
type MemberRecord struct {
	ID         string        `json:"id"`         // agent ID, unique in the cluster
	Protocol   spec.Protocol `json:"protocol"`   // static or balanced (KIP-987)
	Connectors []string      `json:"connectors"` // declared static.connectors
	Tasks      []string      `json:"tasks"`      // declared static.tasks
	Addr       string        `json:"addr"`       // the agent's API address, host:port (https://host:port with TLS)
	Started    time.Time     `json:"started"`    // when this session joined (UTC)
	// Layout is the store layout the agent reads (cluster.Layout: 2,
	// per-member shares); 0 for an agent of the single-key layout, for
	// which the leader also writes <prefix>/assignment (package cluster,
	// "Upgrade").
	Layout int   `json:"layout,omitempty"`
	Lease  int64 `json:"-"` // the etcd lease ID the record is bound to
}

// Member returns the record as the assignment function sees it.
func (r MemberRecord) Member() assign.Member {
	return assign.Member{ID: r.ID, Protocol: r.Protocol, Connectors: r.Connectors, Tasks: r.Tasks}
}

// Members returns the live members' records, sorted by ID, read page by
// page at one revision (about 200 bytes per member: for views and tools;
// MembersOf reads a few by ID). It returns an error when the store cannot
// be read or a record is not valid JSON.
func (s *Store) Members(ctx context.Context) ([]MemberRecord, error) {
	dir := s.keys.MembersDir()
	var out []MemberRecord
	_, err := RangePrefix(ctx, s.etcd, dir, 0, func(kv *mvccpb.KeyValue) error {
		r, err := DecodeMember(kv.Value, kv.Lease)
		if err != nil {
			return fmt.Errorf("member record %s: %w", kv.Key, err)
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list members under %s: %w", dir, err)
	}
	if out == nil {
		out = []MemberRecord{}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// MembersOf returns the records of the live members among ids, by ID (IDs
// without a live member are absent), read by key, MaxTxnOps per
// transaction: e.g. the addresses of the agents that run some connector's
// tasks. It returns an error when an ID is not a valid key segment, the
// store fails, or a record is not valid JSON.
func (s *Store) MembersOf(ctx context.Context, ids []string) (map[string]MemberRecord, error) {
	keys := make([]string, 0, len(ids))
	for _, id := range ids {
		if err := CheckName("member ID", id); err != nil {
			return nil, err
		}
		keys = append(keys, s.keys.Member(id))
	}
	out := map[string]MemberRecord{}
	var bad error
	err := GetKeys(ctx, s.etcd, s.maxTxnOps, keys, func(kv *mvccpb.KeyValue) {
		r, err := DecodeMember(kv.Value, kv.Lease)
		if err != nil {
			bad = fmt.Errorf("member record %s: %w", kv.Key, err)
			return
		}
		out[r.ID] = r
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return nil, fmt.Errorf("read members: %w", err)
	}
	return out, nil
}

// DecodeMember decodes a stored member record; lease is the etcd lease
// the key is bound to (the key's Lease). It returns an error when b is not
// valid JSON.
func DecodeMember(b []byte, lease int64) (MemberRecord, error) {
	var r MemberRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decode member record: %w", err)
	}
	r.Lease = lease
	return r, nil
}

// WaitMemberGone blocks until no member record of id is stored (its
// session ended or its lease expired) and returns nil, or returns ctx's
// error when ctx ends first, or a store error. An agent restarted before
// its previous session's lease ran out waits here instead of polling: the
// store deletes the record the moment it expires the lease, which on a
// store that restarted or changed leader meanwhile is up to the lease's
// TTL plus the store's election timeout after the new leader's first
// commit (etcd's lessor Promote), not the TTL after the old session's last
// renewal.
func (s *Store) WaitMemberGone(ctx context.Context, id string) error {
	if err := CheckName("member ID", id); err != nil {
		return err
	}
	key := s.keys.Member(id)
	for {
		resp, err := s.etcd.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("wait for member %s to be gone: %w", id, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.etcd.Watch(wctx, key, clientv3.WithRev(resp.Header.Revision+1))
		gone := false
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					gone = true
				}
			}
			if gone {
				break
			}
		}
		cancel()
		if gone {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("wait for member %s to be gone: %w", id, err)
		}
		// The watch failed (compaction, lost leader): read again.
	}
}
