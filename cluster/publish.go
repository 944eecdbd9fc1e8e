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
// (or nothing has been, or the state asks for a full rewrite): it plans
// the writes (planPublication) and commits them in phases, each phase's
// transactions sent together (a generation's writes would otherwise queue
// one after another behind the claims of the members that already read
// their shares): the shares that only lose jobs, so the jobs they give up
// are released while the members that gain them read their new shares;
// the shares that gain jobs, in waves within the claim window (see
// claimWindow), the last wave with the status buckets and the deletion of
// departed shares; then the head. Every transaction is guarded by our
// election key and kept within MaxTxnOps and MaxRequestBytes (pack).
//
// Errors: ErrNotLeader (wrapped) when the guard fails; a store or encoding
// error, wrapping errCutShort when some transactions had committed.
func (l *leader) publish(ctx context.Context, a assign.Assignment) error {
	c := l.c
	jobConn := l.jobConnectors()
	plan, ok, err := planPublication(c, pubInput{prev: l.pub, assignment: a, leader: l.s.record.ID,
		shareOf:    func(jobs []string) shareContent { return l.shareContentOf(jobs, jobConn) },
		oldMembers: l.oldMembers(), now: time.Now()})
	if err != nil || !ok {
		return err
	}
	gen := plan.published.Generation
	start := time.Now()
	stats := PublishStats{Generation: gen, Compute: l.computed, Shares: plan.written + len(plan.cleanup),
		Buckets: len(plan.status)}
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
	var window *claimWindow
	if limit := c.cfg.ClaimWindow; limit > 0 && plan.gained() > limit {
		window = c.openClaimWindow(ctx, limit, l.waveTimeout())
		defer window.close()
	} else if all := plan.all(); len(c.pack(all, c.cfg.MaxTxnOps)) == 1 {
		// A small publication (a member lost or joined) that fits one
		// transaction is written in one, head included: one round trip.
		if err := commit(all); err != nil {
			return err
		}
		stats.Waves = 1
		return l.published(plan.next, stats, start)
	}
	if err := commit(plan.first); err != nil {
		return err
	}
	gaining := plan.gaining
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
			ops = append(ops, slices.Concat(plan.cleanup, plan.status)...)
		}
		if err := commit(ops); err != nil {
			return err
		}
		window.add(handed)
		stats.Waves++
		i = j
	}
	if err := commit(plan.tail); err != nil {
		return err
	}
	return l.published(plan.next, stats, start)
}

// published records a publication as stored and reports it.
func (l *leader) published(next pubState, stats PublishStats, start time.Time) error {
	stats.Write = time.Since(start)
	l.pub = next
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

// oldMembers reports whether an agent of the single-key layout is a member.
func (l *leader) oldMembers() bool {
	for _, r := range l.members {
		if r.Layout < Layout {
			return true
		}
	}
	return false
}
