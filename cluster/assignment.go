package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Published is a whole published assignment: every member's share and the
// per-job status, as one value. Assembling it reads data proportional to
// the cluster (Client.Assignment); an agent reads its own Share instead.
type Published struct {
	Generation int64             // 1 for the first assignment; +1 on every change
	Leader     string            // member ID of the leader that published it
	Assignment assign.Assignment // who runs what, what is unassigned and why, conflicts
}

// publishedJSON is the single-key layout's stored form, <prefix>/assignment:
// {generation, leader, members:{id:[jobs]}, unassigned:{job:reason},
// conflicts:[{job, members, winner}], held:{job:member},
// declared:{job:member}}. A leader of this layout writes it, with layout 2,
// while agents of the single-key layout are members (doc.go, "Upgrade");
// a leader of the single-key layout writes it without.
type publishedJSON struct {
	Generation int64               `json:"generation"`
	Leader     string              `json:"leader"`
	Members    map[string][]string `json:"members"`
	Unassigned map[string]string   `json:"unassigned"`
	Conflicts  []conflictJSON      `json:"conflicts"`
	Held       map[string]string   `json:"held"`
	Declared   map[string]string   `json:"declared"`
	Layout     int                 `json:"layout,omitempty"`
}

type conflictJSON struct {
	Job     string   `json:"job"`
	Members []string `json:"members"`
	Winner  string   `json:"winner"`
}

// encodeLegacy returns p in the single-key layout's form, marked with
// layout (0: unmarked, as a leader of that layout wrote it).
func encodeLegacy(p Published, layout int) ([]byte, error) {
	j := publishedJSON{Generation: p.Generation, Leader: p.Leader, Layout: layout,
		Members: map[string][]string{}, Unassigned: map[string]string{}, Conflicts: []conflictJSON{},
		Held: map[string]string{}, Declared: map[string]string{}}
	for m, jobs := range p.Assignment.Members {
		if jobs == nil {
			jobs = []string{}
		}
		j.Members[m] = jobs
	}
	maps.Copy(j.Unassigned, p.Assignment.Unassigned)
	maps.Copy(j.Held, p.Assignment.Held)
	maps.Copy(j.Declared, p.Assignment.Declared)
	for _, cf := range p.Assignment.Conflicts {
		j.Conflicts = append(j.Conflicts, conflictJSON{Job: cf.Job, Members: cf.Members, Winner: cf.Winner})
	}
	return json.Marshal(j)
}

// decodeLegacy decodes the single-key layout's value and its layout mark.
func decodeLegacy(b []byte) (Published, int, error) {
	var j publishedJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Published{}, 0, fmt.Errorf("decode published assignment: %w", err)
	}
	p := Published{Generation: j.Generation, Leader: j.Leader, Assignment: assign.Assignment{
		Members: j.Members, Unassigned: j.Unassigned, Held: j.Held, Declared: j.Declared}}
	for _, cf := range j.Conflicts {
		p.Assignment.Conflicts = append(p.Assignment.Conflicts, assign.Conflict{Job: cf.Job, Members: cf.Members, Winner: cf.Winner})
	}
	normalise(&p.Assignment)
	return p, j.Layout, nil
}

// normalise makes a's maps non-nil.
func normalise(a *assign.Assignment) {
	if a.Members == nil {
		a.Members = map[string][]string{}
	}
	if a.Unassigned == nil {
		a.Unassigned = map[string]string{}
	}
	if a.Held == nil {
		a.Held = map[string]string{}
	}
	if a.Declared == nil {
		a.Declared = map[string]string{}
	}
}

// snapshot is the publication as stored, read at one revision: what a new
// leader starts from and what Client.Assignment assembles.
type snapshot struct {
	head    Head
	shares  map[string]chunkSet      // member -> its stored chunks
	buckets map[string]*statusBucket // bucket name -> content
	legacy  *Published               // <prefix>/assignment, if stored
	marked  bool                     // legacy was written by a leader of this layout
	maxGen  int64                    // highest generation of head, chunks and buckets
}

func newSnapshot() *snapshot {
	return &snapshot{shares: map[string]chunkSet{}, buckets: map[string]*statusBucket{}}
}

// add takes one key of <prefix>/pub/ or the legacy key; keys it does not
// know are ignored.
func (sn *snapshot) add(c *Client, kv *mvccpb.KeyValue) error {
	key := string(kv.Key)
	switch {
	case key == c.keys.Head():
		h, err := decodeHead(kv.Value)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		sn.head = h
		sn.maxGen = max(sn.maxGen, h.Generation)
	case key == c.keys.Legacy():
		p, layout, err := decodeLegacy(kv.Value)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		sn.legacy, sn.marked = &p, layout >= Layout
	case strings.HasPrefix(key, c.keys.StatusDir()):
		b, err := decodeBucket(kv.Value)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		sn.buckets[strings.TrimPrefix(key, c.keys.StatusDir())] = &b
		sn.maxGen = max(sn.maxGen, b.Generation)
	default:
		member, i, ok := c.keys.ParseShareChunk(key)
		if !ok {
			return nil
		}
		ch, err := decodeShareChunk(kv.Value)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if sn.shares[member] == nil {
			sn.shares[member] = chunkSet{}
		}
		sn.shares[member][i] = ch
		sn.maxGen = max(sn.maxGen, ch.Generation)
	}
	return nil
}

// legacyAhead reports whether the legacy value is newer than the
// per-member publication: a leader of the single-key layout has published
// since (a mixed cluster during an upgrade).
func (sn *snapshot) legacyAhead() bool {
	return sn.legacy != nil && !sn.marked && sn.legacy.Generation > sn.maxGen
}

// published assembles the whole assignment. Members are those with a
// share that is not departed; a share cut short by a failed leader counts
// with the jobs of all its chunks.
func (sn *snapshot) published() Published {
	if sn.legacyAhead() {
		return *sn.legacy
	}
	p := Published{Generation: sn.maxGen, Leader: sn.head.Leader}
	a := &p.Assignment
	normalise(a)
	for member, cs := range sn.shares {
		if s, ok := cs.assemble(member); ok {
			if !s.Departed {
				a.Members[member] = s.Jobs
			}
			continue
		}
		a.Members[member] = cs.allJobs()
	}
	st := newStatus()
	for _, b := range sn.buckets {
		b.mergeInto(&st)
	}
	sortConflicts(st.Conflicts)
	a.Unassigned, a.Held, a.Declared, a.Conflicts = st.Unassigned, st.Held, st.Declared, st.Conflicts
	if p.Leader == "" {
		for _, cs := range sn.shares {
			if c0, ok := cs[0]; ok && c0.Generation == sn.maxGen {
				p.Leader = c0.Leader
			}
		}
	}
	return p
}

// readSnapshot reads <prefix>/pub/ and the legacy key page by page at one
// revision, and returns the snapshot and that revision. A compaction in the
// middle makes it start again.
func (c *Client) readSnapshot(ctx context.Context) (*snapshot, int64, error) {
	for {
		sn := newSnapshot()
		add := func(kv *mvccpb.KeyValue) error { return sn.add(c, kv) }
		rev, err := store.RangePrefix(ctx, c.etcd, c.keys.PubDir(), 0, add)
		if err == nil {
			_, err = store.RangePrefix(ctx, c.etcd, c.keys.Legacy(), rev, func(kv *mvccpb.KeyValue) error {
				if string(kv.Key) != c.keys.Legacy() {
					return nil // a longer key that shares the prefix
				}
				return add(kv)
			})
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		return sn, rev, nil
	}
}

// complete reports whether the snapshot holds a finished publication: its
// head is at the highest generation stored.
func (sn *snapshot) complete() bool { return sn.legacyAhead() || sn.head.Generation == sn.maxGen }

// assignmentReads is how often Assignment reads again while a publication
// is under way before it returns the mixed state.
const assignmentReads = 5

// Assignment returns the whole published assignment, read page by page at
// one revision; the zero Published (Generation 0) when none has been
// published yet. When it finds a publication under way (shares of a newer
// generation than the head) it reads again, with backoff, a few times;
// then it returns what is stored, the newest share of every member. It
// reads data proportional to the cluster (about 60 bytes per job): for
// tools and views, not for an agent's own work (WatchShare). It returns an
// error when the store cannot be read or a stored value is not valid JSON.
func (c *Client) Assignment(ctx context.Context) (Published, error) {
	b := newBackoff()
	for i := 0; ; i++ {
		sn, _, err := c.readSnapshot(ctx)
		if err != nil {
			return Published{}, fmt.Errorf("read assignment: %w", err)
		}
		if sn.maxGen == 0 && sn.legacy == nil {
			return Published{}, nil
		}
		if sn.complete() || i+1 == assignmentReads || !pause(ctx, b) {
			return sn.published(), nil
		}
	}
}

// WatchAssignment returns a channel that delivers the whole published
// assignment: first the current one (if any has been published), then
// every new generation in increasing order, never one twice. It watches
// the publication head (and the single-key layout's value, for a leader of
// that layout) and reads the whole assignment on each new generation, so
// every delivery reads data proportional to the cluster: it suits tools
// and small clusters; an agent watches its own share (WatchShare) and the
// head (WatchHead). Generations published while a read is under way may be
// skipped; order is kept. The channel is closed when ctx ends.
func (c *Client) WatchAssignment(ctx context.Context) <-chan Published {
	out := make(chan Published)
	go func() {
		defer close(out)
		var last int64
		c.follow(ctx, []watchSpec{{key: c.keys.Head()}, {key: c.keys.Legacy()}}, followFuncs{
			event: func(int, string, []byte, bool) {},
			settled: func() bool {
				b := newBackoff()
				for {
					p, err := c.Assignment(ctx)
					if err == nil {
						if p.Generation <= last {
							return true
						}
						select {
						case out <- p:
							last = p.Generation
							return true
						case <-ctx.Done():
							return false
						}
					}
					if !pause(ctx, b) {
						return false
					}
				}
			},
		})
	}()
	return out
}

// owners returns the sorted IDs of members that own jobs in a: members with
// an entry in a.Members and departed members that a.Held keeps jobs for.
func owners(a assign.Assignment) []string {
	ids := slices.Collect(maps.Keys(a.Members))
	for _, id := range a.Held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
