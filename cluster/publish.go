package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthd/berth/assign"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errCutShort: a publication failed after some of its transactions
// committed; the leader reads the stored state again before the next one.
var errCutShort = errors.New("publication cut short")

// publish stores a as generation+1 if it differs from what is published
// (or nothing has been, or the state asks for a full rewrite): the shares
// of members whose share changed, a departed tombstone for each member that
// left, the status buckets that changed, the single-key value while agents
// of that layout are members, and the head last. Shares that only lose jobs
// go first, so the jobs they give up are released while the members that
// gain them read their new shares. Every transaction is guarded by our
// election key and kept within MaxTxnOps and MaxRequestBytes.
//
// Errors: ErrNotLeader (wrapped) when the guard fails; a store or encoding
// error, wrapping errCutShort when some transactions had committed.
func (l *leader) publish(ctx context.Context, a assign.Assignment) error {
	c := l.c
	normalise(&a)
	gen := l.pub.generation + 1
	me := l.s.record.ID
	jobConn := l.jobConnectors()

	var first []sizedOp   // shares that only lose jobs, and departed ones
	var gaining []gainOps // shares that gain jobs
	shares := maps.Clone(l.pub.shares)
	changes, written := 0, 0 // shares and buckets changed; shares written
	writeShare := func(id string, content shareContent) ([]sizedOp, error) {
		vals, err := c.encodeShare(content, gen, me)
		if err != nil {
			return nil, fmt.Errorf("leader: share of %s: %w", id, err)
		}
		var ops []sizedOp
		for i, v := range vals {
			ops = append(ops, putOp(c.shareChunkKey(id, i), string(v)))
		}
		for i := len(vals); i < shares[id].chunks; i++ {
			ops = append(ops, deleteOp(c.shareChunkKey(id, i)))
		}
		shares[id] = storedShare{content: content, valid: true, chunks: len(vals)}
		changes++
		written++
		return ops, nil
	}
	for _, id := range slices.Sorted(maps.Keys(a.Members)) {
		content := l.shareContentOf(a.Members[id], jobConn)
		st, ok := shares[id]
		if ok && st.valid && st.content.equal(content) {
			continue
		}
		var prev []string
		if ok && st.valid {
			prev = st.content.jobs
		}
		ops, err := writeShare(id, content)
		if err != nil {
			return err
		}
		gained := newJobs(content.jobs, prev)
		if len(gained) == 0 {
			first = append(first, ops...)
			continue
		}
		g := gainOps{ops: ops, jobs: map[string]string{}}
		for _, j := range gained {
			g.jobs[j] = id
		}
		gaining = append(gaining, g)
	}
	var cleanup []sizedOp // tombstones of the previous publication
	for _, id := range slices.Sorted(maps.Keys(shares)) {
		if _, live := a.Members[id]; live {
			continue
		}
		st := shares[id]
		if st.valid && st.content.departed {
			// Published as departed before: delete it with this publication.
			cleanup = append(cleanup, deleteOp(c.shareDir(id), clientv3.WithPrefix()))
			delete(shares, id)
			continue
		}
		ops, err := writeShare(id, shareContent{departed: true, jobs: []string{}})
		if err != nil {
			return err
		}
		first = append(first, ops...)
	}
	var status []sizedOp
	buckets := maps.Clone(l.pub.buckets)
	next := bucketsOf(a)
	for _, name := range slices.Sorted(maps.Keys(next)) {
		b := next[name]
		content, err := bucketContent(b)
		if err != nil {
			return fmt.Errorf("leader: %w", err)
		}
		if buckets[name] == content {
			continue
		}
		b.Generation = gen
		v, err := jsonString(b)
		if err != nil {
			return fmt.Errorf("leader: encode status bucket %s: %w", name, err)
		}
		status = append(status, putOp(c.statusDir()+name, v))
		buckets[name] = content
		changes++
	}
	for _, name := range slices.Sorted(maps.Keys(buckets)) {
		if _, ok := next[name]; !ok {
			status = append(status, deleteOp(c.statusDir()+name))
			delete(buckets, name)
			changes++
		}
	}
	if changes == 0 && !l.pub.force {
		return nil
	}

	p := Published{Generation: gen, Leader: me, Assignment: a}
	var tail []sizedOp
	legacy := l.pub.legacy
	if l.oldMembers() {
		v, err := encodeLegacy(p, Layout)
		if err != nil {
			return fmt.Errorf("leader: encode generation %d for the single-key layout: %w", gen, err)
		}
		// Beyond one request the single-key layout cannot hold it at all;
		// its agents then keep their last generation (doc.go, "Upgrade").
		if len(v)+len(c.legacyKey())+opOverhead <= c.requestBudget() {
			tail = append(tail, putOp(c.legacyKey(), string(v)))
			legacy = true
		}
	} else if legacy {
		tail = append(tail, deleteOp(c.legacyKey()))
		legacy = false
	}
	head := Head{Generation: gen, Leader: me, Layout: Layout, Members: len(a.Members),
		Unassigned: len(a.Unassigned), Conflicts: len(a.Conflicts), Published: time.Now().UTC()}
	for _, jobs := range a.Members {
		head.Jobs += len(jobs)
	}
	hv, err := jsonString(head)
	if err != nil {
		return fmt.Errorf("leader: encode head of generation %d: %w", gen, err)
	}
	tail = append(tail, putOp(c.headKey(), hv))

	// Phases, each phase's transactions sent together (a generation's
	// writes would otherwise queue one after another behind the claims of
	// the members that already read their shares): the shares that only
	// lose jobs; the shares that gain jobs, in waves within the claim
	// window (see claimWindow), the last wave with the status buckets and
	// the deletion of departed shares; then the head.
	start := time.Now()
	stats := PublishStats{Generation: gen, Compute: l.computed, Shares: written + len(cleanup),
		Buckets: len(status)}
	var committed atomic.Int64
	commit := func(ops []sizedOp) error {
		txns := c.pack(ops, c.cfg.MaxTxnOps)
		for _, o := range ops {
			stats.Bytes += o.size
		}
		stats.Transactions += len(txns)
		if err := l.commitAll(ctx, gen, txns, &committed); err != nil {
			if committed.Load() > 0 && !errors.Is(err, ErrNotLeader) {
				return fmt.Errorf("%w: %w", errCutShort, err)
			}
			return err
		}
		return nil
	}
	total := 0
	for _, g := range gaining {
		total += len(g.jobs)
	}
	var window *claimWindow
	if limit := c.cfg.ClaimWindow; limit > 0 && total > limit {
		window = c.openClaimWindow(ctx, limit, l.waveTimeout())
		defer window.close()
	} else {
		// A small publication (a member lost or joined) that fits one
		// transaction is written in one, head included: one round trip.
		all := slices.Clone(first)
		for _, g := range gaining {
			all = append(all, g.ops...)
		}
		all = slices.Concat(all, cleanup, status, tail)
		if len(c.pack(all, c.cfg.MaxTxnOps)) == 1 {
			if err := commit(all); err != nil {
				return err
			}
			stats.Waves = 1
			return l.published(p, shares, buckets, legacy, stats, start)
		}
	}
	if err := commit(first); err != nil {
		return err
	}
	for i := 0; i < len(gaining) || stats.Waves == 0; {
		if i < len(gaining) {
			window.waitRoom(ctx, len(gaining[i].jobs))
		}
		// At least one share per wave; more while they fit the window.
		j, handed := i, map[string]string{}
		var ops []sizedOp
		for j < len(gaining) && (j == i || window == nil || window.outstanding()+len(handed)+len(gaining[j].jobs) <= c.cfg.ClaimWindow) {
			ops = append(ops, gaining[j].ops...)
			maps.Copy(handed, gaining[j].jobs)
			j++
		}
		if j == len(gaining) {
			ops = append(ops, slices.Concat(cleanup, status)...)
		}
		if err := commit(ops); err != nil {
			return err
		}
		window.add(handed)
		stats.Waves++
		i = j
	}
	if err := commit(tail); err != nil {
		return err
	}
	return l.published(p, shares, buckets, legacy, stats, start)
}

// published records a publication as stored and reports it.
func (l *leader) published(p Published, shares map[string]storedShare, buckets map[string]string, legacy bool, stats PublishStats, start time.Time) error {
	stats.Write = time.Since(start)
	l.pub = pubState{generation: p.Generation, leader: p.Leader, assignment: p.Assignment, shares: shares, buckets: buckets, legacy: legacy}
	if f := l.c.cfg.OnPublish; f != nil {
		f(stats)
	}
	return nil
}

// publishParallel is how many transactions of one publication phase are in
// flight at once.
const publishParallel = 8

// commitAll sends the guarded transactions txns, publishParallel at a time,
// counting those that commit, and returns the first error (ErrNotLeader
// first: it ends the leadership).
func (l *leader) commitAll(ctx context.Context, gen int64, txns [][]clientv3.Op, committed *atomic.Int64) error {
	sem := make(chan struct{}, publishParallel)
	errs := make([]error, len(txns))
	var wg sync.WaitGroup
	for i, txn := range txns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			what := fmt.Sprintf("publish generation %d (%d operations)", gen, len(txn))
			if errs[i] = l.guarded(ctx, what, txn...); errs[i] == nil {
				committed.Add(1)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if errors.Is(err, ErrNotLeader) {
			return err
		}
	}
	return errors.Join(errs...)
}

// PublishStats describes one publication (Config.OnPublish), for metrics
// and the scale simulation.
type PublishStats struct {
	Generation   int64         // the generation published
	Compute      time.Duration // assign.Compute of this generation
	Write        time.Duration // all its transactions, from the first sent to the head stored
	Shares       int           // shares written (changed, new, departed) or deleted
	Buckets      int           // status buckets written or deleted
	Transactions int           // guarded transactions sent
	Bytes        int           // upper bound of the bytes of their operations
	Waves        int           // waves of shares that gain jobs (see Config.ClaimWindow)
}

// gainOps is the writes of one share that gains jobs, and those jobs (job
// -> member).
type gainOps struct {
	ops  []sizedOp
	jobs map[string]string
}

// waveTimeout is how long a handed-out job counts against the claim window.
func (l *leader) waveTimeout() time.Duration {
	if l.c.waveTimeout > 0 {
		return l.c.waveTimeout
	}
	return defaultClaimWaveTimeout
}

// shareContentOf is the share of a member that runs jobs: the jobs, sorted,
// with the definition revisions of their connectors and groups.
func (l *leader) shareContentOf(jobs []string, jobConn map[string]string) shareContent {
	sc := shareContent{jobs: slices.Clone(jobs), connectors: map[string]int64{}, groups: map[string]int64{}}
	if sc.jobs == nil {
		sc.jobs = []string{}
	}
	slices.Sort(sc.jobs)
	for _, j := range sc.jobs {
		name, ok := jobConn[j]
		if !ok {
			continue
		}
		def := l.connectors[name]
		sc.connectors[name] = def.rev
		if g := def.conn.Group; g != "" {
			sc.groups[g] = l.groups[g]
		}
	}
	return sc
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
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

// oldMembers reports whether an agent of the single-key layout is a member.
func (l *leader) oldMembers() bool {
	for _, r := range l.members {
		if r.Layout < Layout {
			return true
		}
	}
	return false
}
