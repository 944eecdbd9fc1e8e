package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// statusBuckets is how many buckets hold the per-job parts of the
// assignment that belong to no live member: unassigned jobs and why, rule 5
// holds, declarations of absent members, static conflicts. A job lives in
// bucket fnv-1a(job ID) mod 256, <prefix>/pub/status/<2 hex digits>, so a
// change of a few jobs rewrites a few buckets, and a bucket stays small
// (100,000 unassigned jobs: about 20 KiB per bucket; one bucket reaches the
// 1.5 MiB request limit only past some 7 million such jobs).
const statusBuckets = 256

// Status is the part of the published assignment that is not a member's
// share: per job, as assign.Assignment names them.
type Status struct {
	Unassigned map[string]string // job ID -> why it runs nowhere
	Held       map[string]string // job ID -> departed member it is held for (rule 5)
	Declared   map[string]string // job ID -> the member whose declaration claims it
	Conflicts  []assign.Conflict // jobs declared by more than one live member, by job
}

// statusBucket is the stored form of one bucket.
type statusBucket struct {
	Generation int64             `json:"generation,omitempty"`
	Unassigned map[string]string `json:"unassigned,omitempty"`
	Held       map[string]string `json:"held,omitempty"`
	Declared   map[string]string `json:"declared,omitempty"`
	Conflicts  []conflictJSON    `json:"conflicts,omitempty"`
}

// bucketOf names job's status bucket: two hex digits.
func bucketOf(job string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(job))
	return fmt.Sprintf("%02x", h.Sum32()%statusBuckets)
}

// bucketsOf splits a's per-job status into buckets (only non-empty ones).
func bucketsOf(a assign.Assignment) map[string]*statusBucket {
	out := map[string]*statusBucket{}
	get := func(job string) *statusBucket {
		name := bucketOf(job)
		b := out[name]
		if b == nil {
			b = &statusBucket{}
			out[name] = b
		}
		return b
	}
	for j, why := range a.Unassigned {
		b := get(j)
		if b.Unassigned == nil {
			b.Unassigned = map[string]string{}
		}
		b.Unassigned[j] = why
	}
	for j, m := range a.Held {
		b := get(j)
		if b.Held == nil {
			b.Held = map[string]string{}
		}
		b.Held[j] = m
	}
	for j, m := range a.Declared {
		b := get(j)
		if b.Declared == nil {
			b.Declared = map[string]string{}
		}
		b.Declared[j] = m
	}
	for _, cf := range a.Conflicts { // sorted by job: each bucket's list is too
		b := get(cf.Job)
		b.Conflicts = append(b.Conflicts, conflictJSON{Job: cf.Job, Members: cf.Members, Winner: cf.Winner})
	}
	return out
}

// mergeInto adds the bucket's entries to st.
func (b *statusBucket) mergeInto(st *Status) {
	maps.Copy(st.Unassigned, b.Unassigned)
	maps.Copy(st.Held, b.Held)
	maps.Copy(st.Declared, b.Declared)
	for _, cf := range b.Conflicts {
		st.Conflicts = append(st.Conflicts, assign.Conflict{Job: cf.Job, Members: cf.Members, Winner: cf.Winner})
	}
}

func newStatus() Status {
	return Status{Unassigned: map[string]string{}, Held: map[string]string{}, Declared: map[string]string{}}
}

func decodeBucket(b []byte) (statusBucket, error) {
	var sb statusBucket
	if err := json.Unmarshal(b, &sb); err != nil {
		return sb, fmt.Errorf("decode status bucket: %w", err)
	}
	return sb, nil
}

// bucketContent is a bucket's encoding without its generation: what the
// leader compares to decide whether a bucket changed.
func bucketContent(b *statusBucket) (string, error) {
	cp := *b
	cp.Generation = 0
	v, err := json.Marshal(cp)
	if err != nil {
		return "", fmt.Errorf("encode status bucket: %w", err)
	}
	return string(v), nil
}

// Status returns the published assignment's per-job status (unassigned
// jobs, holds, declarations, conflicts), read page by page at one revision
// (rev; 0: the current one), and the revision read. It returns a store
// error, or a decode error naming the bucket key.
func (c *Client) Status(ctx context.Context, rev int64) (Status, int64, error) {
	st := newStatus()
	rev, err := store.RangePrefix(ctx, c.etcd, c.keys.StatusDir(), rev, func(kv *mvccpb.KeyValue) error {
		b, err := decodeBucket(kv.Value)
		if err != nil {
			return fmt.Errorf("%s: %w", kv.Key, err)
		}
		b.mergeInto(&st)
		return nil
	})
	if err != nil {
		return Status{}, 0, err
	}
	sortConflicts(st.Conflicts)
	return st, rev, nil
}

func sortConflicts(cs []assign.Conflict) {
	slices.SortFunc(cs, func(a, b assign.Conflict) int { return strings.Compare(a.Job, b.Job) })
}
