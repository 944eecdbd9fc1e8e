package cluster

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/berthd/berth/assign"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// pubInput is what one publication is computed from: the stored state and
// the new assignment. Nothing in it is read from etcd by planPublication.
type pubInput struct {
	prev       pubState                         // what the store holds, as last read or written
	assignment assign.Assignment                // the new assignment
	leader     string                           // our member ID
	shareOf    func(jobs []string) shareContent // a member's share content for its jobs (definition revisions)
	oldMembers bool                             // an agent of the single-key layout is a member
	now        time.Time                        // the head's publication time
}

// pubPlan is the writes of one publication, by phase, in the order they
// are committed (leader.publish): first, then gaining in waves, the last
// wave with cleanup and status, then tail. The phases are not yet packed
// into transactions: the waves of gaining depend on the claim window at
// commit time.
type pubPlan struct {
	published Published
	first     []sizedOp // shares that only lose jobs (or whose definitions changed), departed tombstones
	gaining   []gainOps // shares that gain jobs, by member ID
	cleanup   []sizedOp // deletion of the tombstones published before
	status    []sizedOp // status buckets written or deleted
	tail      []sizedOp // the single-key value or its deletion, then the head: always last
	written   int       // shares written (changed, new, departed)
	next      pubState  // the stored state once every write committed
}

// gainOps is the writes of one share that gains jobs, and those jobs (job
// -> member).
type gainOps struct {
	ops  []sizedOp
	jobs map[string]string
}

// gained is how many jobs the plan hands out to members that did not hold
// them.
func (p *pubPlan) gained() int {
	n := 0
	for _, g := range p.gaining {
		n += len(g.jobs)
	}
	return n
}

// all is every write of the plan in commit order.
func (p *pubPlan) all() []sizedOp {
	all := slices.Clone(p.first)
	for _, g := range p.gaining {
		all = append(all, g.ops...)
	}
	return slices.Concat(all, p.cleanup, p.status, p.tail)
}

// planPublication computes the writes that store in.assignment as
// generation in.prev.generation+1 with c's key layout and size limits
// (Config.MaxRequestBytes for share chunks and the single-key value): the
// shares of members whose share content changed, a departed tombstone for
// each member that left (deleted with the next publication), the status
// buckets that changed, the single-key value while agents of that layout
// are members (its deletion once none is), and the head. It does no I/O.
//
// ok is false when nothing changed (tombstone deletions alone do not count)
// and in.prev does not ask for a rewrite (force): there is nothing to
// publish. It returns an encoding error naming the share, bucket or head.
func planPublication(c *Client, in pubInput) (plan pubPlan, ok bool, err error) {
	a := in.assignment
	normalise(&a)
	pl := &planner{c: c, in: in, gen: in.prev.generation + 1, shares: maps.Clone(in.prev.shares),
		buckets: maps.Clone(in.prev.buckets)}
	if pl.shares == nil {
		pl.shares = map[string]storedShare{}
	}
	if pl.buckets == nil {
		pl.buckets = map[string]string{}
	}
	if err := pl.planShares(a); err != nil {
		return pubPlan{}, false, err
	}
	if err := pl.planStatus(a); err != nil {
		return pubPlan{}, false, err
	}
	if pl.changes == 0 && !in.prev.force {
		return pubPlan{}, false, nil
	}
	pl.plan.published = Published{Generation: pl.gen, Leader: in.leader, Assignment: a}
	legacy, err := pl.planTail()
	if err != nil {
		return pubPlan{}, false, err
	}
	pl.plan.next = pubState{generation: pl.gen, leader: in.leader, assignment: a, shares: pl.shares,
		buckets: pl.buckets, legacy: legacy}
	return pl.plan, true, nil
}

// planner is the state of one planPublication: the plan so far and the
// stored state as it will be once the plan's writes so far commit.
type planner struct {
	c       *Client
	in      pubInput
	gen     int64                  // the generation planned
	shares  map[string]storedShare // member -> its share after the plan
	buckets map[string]string      // status bucket -> its content after the plan
	changes int                    // shares and buckets changed
	plan    pubPlan
}

// writeShare returns the writes that store content as id's share: its
// chunks, and the deletion of chunks its previous version had beyond
// them.
func (pl *planner) writeShare(id string, content shareContent) ([]sizedOp, error) {
	c := pl.c
	vals, err := c.encodeShare(content, pl.gen, pl.in.leader)
	if err != nil {
		return nil, fmt.Errorf("leader: share of %s: %w", id, err)
	}
	var ops []sizedOp
	for i, v := range vals {
		ops = append(ops, putOp(c.keys.ShareChunk(id, i), string(v)))
	}
	for i := len(vals); i < pl.shares[id].chunks; i++ {
		ops = append(ops, deleteOp(c.keys.ShareChunk(id, i)))
	}
	pl.shares[id] = storedShare{content: content, valid: true, chunks: len(vals)}
	pl.changes++
	pl.plan.written++
	return ops, nil
}

// planShares plans the shares: of every member of a whose share changed
// (first when it gains no job, else in gaining), a tombstone for every
// member that left, and the deletion of tombstones published before.
func (pl *planner) planShares(a assign.Assignment) error {
	for _, id := range slices.Sorted(maps.Keys(a.Members)) {
		content := pl.in.shareOf(a.Members[id])
		st, ok := pl.shares[id]
		if ok && st.valid && st.content.equal(content) {
			continue
		}
		var prev []string
		if ok && st.valid {
			prev = st.content.jobs
		}
		ops, err := pl.writeShare(id, content)
		if err != nil {
			return err
		}
		gained := newJobs(content.jobs, prev)
		if len(gained) == 0 {
			pl.plan.first = append(pl.plan.first, ops...)
			continue
		}
		g := gainOps{ops: ops, jobs: map[string]string{}}
		for _, j := range gained {
			g.jobs[j] = id
		}
		pl.plan.gaining = append(pl.plan.gaining, g)
	}
	for _, id := range slices.Sorted(maps.Keys(pl.shares)) {
		if _, live := a.Members[id]; live {
			continue
		}
		st := pl.shares[id]
		if st.valid && st.content.departed {
			// Published as departed before: delete it with this publication.
			pl.plan.cleanup = append(pl.plan.cleanup, deleteOp(pl.c.keys.ShareDir(id), clientv3.WithPrefix()))
			delete(pl.shares, id)
			continue
		}
		ops, err := pl.writeShare(id, shareContent{departed: true, jobs: []string{}})
		if err != nil {
			return err
		}
		pl.plan.first = append(pl.plan.first, ops...)
	}
	return nil
}

// planStatus plans the status buckets of a that changed, and the deletion
// of those a leaves empty.
func (pl *planner) planStatus(a assign.Assignment) error {
	next := bucketsOf(a)
	for _, name := range slices.Sorted(maps.Keys(next)) {
		b := next[name]
		content, err := bucketContent(b)
		if err != nil {
			return fmt.Errorf("leader: %w", err)
		}
		if pl.buckets[name] == content {
			continue
		}
		b.Generation = pl.gen
		v, err := jsonString(b)
		if err != nil {
			return fmt.Errorf("leader: encode status bucket %s: %w", name, err)
		}
		pl.plan.status = append(pl.plan.status, putOp(pl.c.keys.StatusBucket(name), v))
		pl.buckets[name] = content
		pl.changes++
	}
	for _, name := range slices.Sorted(maps.Keys(pl.buckets)) {
		if _, ok := next[name]; !ok {
			pl.plan.status = append(pl.plan.status, deleteOp(pl.c.keys.StatusBucket(name)))
			delete(pl.buckets, name)
			pl.changes++
		}
	}
	return nil
}

// planTail plans the writes that go last: the single-key value (or its
// deletion), then the head. It returns whether the single-key value is
// stored afterwards.
func (pl *planner) planTail() (legacy bool, err error) {
	c, p := pl.c, pl.plan.published
	legacy = pl.in.prev.legacy
	if pl.in.oldMembers {
		v, err := encodeLegacy(p, Layout)
		if err != nil {
			return false, fmt.Errorf("leader: encode generation %d for the single-key layout: %w", p.Generation, err)
		}
		// Beyond one request the single-key layout cannot hold it at all;
		// its agents then keep their last generation (doc.go, "Upgrade").
		if len(v)+len(c.keys.Legacy())+opOverhead <= c.requestBudget() {
			pl.plan.tail = append(pl.plan.tail, putOp(c.keys.Legacy(), string(v)))
			legacy = true
		}
	} else if legacy {
		pl.plan.tail = append(pl.plan.tail, deleteOp(c.keys.Legacy()))
		legacy = false
	}
	a := p.Assignment
	head := Head{Generation: p.Generation, Leader: p.Leader, Layout: Layout, Members: len(a.Members),
		Unassigned: len(a.Unassigned), Conflicts: len(a.Conflicts), Published: pl.in.now.UTC()}
	for _, jobs := range a.Members {
		head.Jobs += len(jobs)
	}
	hv, err := jsonString(head)
	if err != nil {
		return false, fmt.Errorf("leader: encode head of generation %d: %w", p.Generation, err)
	}
	pl.plan.tail = append(pl.plan.tail, putOp(c.keys.Head(), hv))
	return legacy, nil
}

// newJobs returns the jobs of sorted next that sorted prev does not hold.
func newJobs(next, prev []string) []string {
	var out []string
	i := 0
	for _, j := range next {
		for i < len(prev) && prev[i] < j {
			i++
		}
		if i == len(prev) || prev[i] != j {
			out = append(out, j)
		}
	}
	return out
}
