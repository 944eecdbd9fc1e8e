package cluster

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultClaimWindow is Config.ClaimWindow when zero: the most jobs the
// leader hands out before their new members have claimed them.
const DefaultClaimWindow = 8192

// defaultClaimWaveTimeout is how long a handed-out job counts against the
// claim window when no claim of it is seen (its member is slow or gone, or
// its previous member has yet to release it).
const defaultClaimWaveTimeout = 2 * time.Second

// claimWindow paces a publication that hands out many jobs. Every job
// claimed is a write bound to a lease; thousands of members claiming a
// hundred jobs each at the same moment queue so many writes in etcd that
// lease renewals wait behind them past their deadline, every session is
// lost, and the members join and claim again (measured by the simulation:
// 1,000 members × 100,000 jobs never settle without it). So the leader
// writes the shares that gain jobs in waves: a wave goes out while the jobs
// handed out and not yet seen claimed, plus the wave's, stay within the
// window. It sees claims through a watch on <prefix>/claims/ that lives as
// long as the publication; a job counts until its claim by its new member
// is seen or its wave is older than the wave timeout.
type claimWindow struct {
	limit   int
	timeout time.Duration
	cancel  context.CancelFunc
	events  clientv3.WatchChan
	dir     string
	out     map[string]string // job -> member it was handed to
	waves   []wave            // oldest first
	broken  bool              // the watch ended: stop pacing
}

// wave is the jobs one wave handed out and when they stop counting.
type wave struct {
	until time.Time
	jobs  []string
}

// openClaimWindow starts the claims watch and waits until etcd has created
// it, so that no claim made after the first wave can be missed.
func (c *Client) openClaimWindow(ctx context.Context, limit int, timeout time.Duration) *claimWindow {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	w := &claimWindow{limit: limit, timeout: timeout, cancel: cancel, dir: c.keys.ClaimsDir(), out: map[string]string{},
		events: c.etcd.Watch(wctx, c.keys.ClaimsDir(), clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterDelete())}
	select {
	case wr, ok := <-w.events:
		if !ok || wr.Err() != nil || !wr.Created {
			w.broken = true
		}
	case <-ctx.Done():
		w.broken = true
	}
	return w
}

// close ends the watch.
func (w *claimWindow) close() {
	if w != nil {
		w.cancel()
		for range w.events {
		}
	}
}

// outstanding is how many handed-out jobs still count.
func (w *claimWindow) outstanding() int {
	if w == nil || w.broken {
		return 0
	}
	return len(w.out)
}

// add counts the jobs of a wave just written, each with the member it was
// handed to.
func (w *claimWindow) add(jobs map[string]string) {
	if w == nil || w.broken || len(jobs) == 0 {
		return
	}
	wv := wave{until: time.Now().Add(w.timeout)}
	for j, m := range jobs {
		w.out[j] = m
		wv.jobs = append(wv.jobs, j)
	}
	w.waves = append(w.waves, wv)
}

// waitRoom returns at once when need more jobs fit the window; otherwise
// once at most half the window is outstanding (so that waves stay large:
// few transactions), the watch has ended, or ctx ends.
func (w *claimWindow) waitRoom(ctx context.Context, need int) {
	if w == nil || len(w.out)+need <= w.limit {
		return
	}
	for !w.broken && len(w.out) > w.limit/2 {
		w.expire(time.Now())
		if len(w.out) <= w.limit/2 {
			return
		}
		t := time.NewTimer(time.Until(w.waves[0].until))
		select {
		case wr, ok := <-w.events:
			if !ok || wr.Err() != nil || wr.Canceled {
				w.broken = true
			}
			for _, ev := range wr.Events {
				job := strings.TrimPrefix(string(ev.Kv.Key), w.dir)
				if m, ok := w.out[job]; ok && m == string(ev.Kv.Value) {
					delete(w.out, job)
				}
			}
		case <-t.C:
		case <-ctx.Done():
			w.broken = true
		}
		t.Stop()
	}
}

// expire stops counting the jobs of waves older than the timeout.
func (w *claimWindow) expire(now time.Time) {
	for len(w.waves) > 0 && !now.Before(w.waves[0].until) {
		for _, j := range w.waves[0].jobs {
			delete(w.out, j)
		}
		w.waves = w.waves[1:]
	}
}
