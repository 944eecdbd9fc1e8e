package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/spec"
	"github.com/cenkalti/backoff/v5"
)

// member is one simulated agent: the real cluster code (its own etcd
// connection, session, leader campaign, share watch, batched claims and
// releases, definitions read by key, fencing) with a stand-in worker that
// records starts and stops instead of forking.
type member struct {
	id      string
	client  *cluster.Client
	traffic *cluster.Traffic
	rec     *recorder

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // run has returned

	mu      sync.Mutex
	dead    bool            // killed: nothing more is recorded
	running map[string]bool // jobs its stand-in worker runs
	session *cluster.Session

	joined   atomic.Bool  // a session is live
	fencings atomic.Int64 // sessions lost while running
	defsRead atomic.Int64 // definitions read by key
	shares   atomic.Int64 // shares delivered by the share watch
	want     atomic.Int64 // jobs in the share it follows
}

// settled reports whether the stand-in worker runs exactly as many jobs as
// the member's share names (it runs no job outside its share).
func (m *member) settled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(len(m.running)) == m.want.Load()
}

// sharesSeen returns how many shares the member's watch delivered.
func (m *member) sharesSeen() int64 { return m.shares.Load() }

// newMember connects a member to etcd; run starts it.
func newMember(ctx context.Context, id string, cfg cluster.Config, rec *recorder) (*member, error) {
	m := &member{id: id, traffic: &cluster.Traffic{}, rec: rec, running: map[string]bool{}, done: make(chan struct{})}
	cfg.Traffic = m.traffic
	c, err := cluster.Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m.client = c
	m.ctx, m.cancel = context.WithCancel(context.Background())
	return m, nil
}

// run joins, serves the session until it ends, fences, and joins again,
// until the member is stopped or killed.
func (m *member) run() {
	defer close(m.done)
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 100*time.Millisecond, 2*time.Second
	for m.ctx.Err() == nil {
		jctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		s, err := m.client.Join(jctx, assign.Member{ID: m.id, Protocol: spec.ProtocolBalanced}, "")
		cancel()
		if err != nil {
			m.rec.note("join: " + err.Error())
			// ErrMemberExists: the previous session's lease has yet to expire.
			if !sleep(m.ctx, b.NextBackOff()) {
				return
			}
			continue
		}
		b.Reset()
		m.mu.Lock()
		m.session = s
		m.mu.Unlock()
		m.joined.Store(true)
		m.serve(s)
		m.joined.Store(false)
		// Fence: the stand-in worker stops every job before the lease can
		// expire on the server.
		m.stopAll()
		if s.Err() != nil && !errors.Is(s.Err(), cluster.ErrSessionClosed) && m.ctx.Err() == nil {
			m.fencings.Add(1)
			m.rec.note("session lost: " + s.Err().Error())
		}
		_ = s.Close()
	}
}

// serve campaigns and follows the member's share while s lives.
func (m *member) serve(s *cluster.Session) {
	sctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sctx.Err() == nil && s.Err() == nil {
			_ = m.client.RunLeader(sctx, s, nil)
			sleep(sctx, 200*time.Millisecond)
		}
	}()
	defer wg.Wait()
	defer cancel()
	shares := m.client.WatchShare(sctx, m.id)
	defer func() {
		for range shares {
		}
	}()
	defer cancel()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 50*time.Millisecond, time.Second
	var cur cluster.Share
	var known map[string]int64 // definition revisions read
	for {
		select {
		case <-s.Done():
			return
		case <-sctx.Done():
			return
		case sh, ok := <-shares:
			if !ok {
				return
			}
			// Take the newest share if several are waiting.
			for more := true; more; {
				select {
				case next, ok := <-shares:
					if !ok {
						return
					}
					sh = next
				default:
					more = false
				}
			}
			cur = sh
			m.shares.Add(1)
			if sh.Departed {
				m.want.Store(0)
			} else {
				m.want.Store(int64(len(sh.Jobs)))
			}
			b.Reset()
		case <-retry.C:
		}
		known = m.readDefinitions(s, cur, known)
		if pending := m.apply(s, cur); pending {
			retry.Reset(b.NextBackOff())
		}
	}
}

// sessionCtx bounds a call under s by its deadline and its end, as the
// agent does.
func sessionCtx(parent context.Context, s *cluster.Session) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(parent, s.Deadline())
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// readDefinitions reads, by key, the definitions of the share's connectors
// whose revision changed (what an agent needs to run its jobs).
func (m *member) readDefinitions(s *cluster.Session, sh cluster.Share, known map[string]int64) map[string]int64 {
	var names []string
	for name, rev := range sh.Connectors {
		if rev == 0 || known[name] != rev {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return known
	}
	ctx, cancel := sessionCtx(m.ctx, s)
	defer cancel()
	conns, _, err := m.client.Definitions(ctx, names)
	if err != nil {
		return known // read again with the next share
	}
	m.defsRead.Add(int64(len(conns)))
	next := make(map[string]int64, len(sh.Connectors))
	for name, rev := range sh.Connectors {
		next[name] = rev
	}
	return next
}

// apply makes the stand-in worker run exactly the share's jobs: it stops
// and releases what is no longer ours, claims what is new (in batches) and
// starts what it won. It reports whether some claims are held by others
// (to be tried again).
func (m *member) apply(s *cluster.Session, sh cluster.Share) (pending bool) {
	want := map[string]bool{}
	if !sh.Departed {
		for _, j := range sh.Jobs {
			want[j] = true
		}
	}
	m.mu.Lock()
	var stop, start []string
	for j := range m.running {
		if !want[j] {
			stop = append(stop, j)
		}
	}
	for j := range want {
		if !m.running[j] {
			start = append(start, j)
		}
	}
	m.mu.Unlock()
	ctx, cancel := sessionCtx(m.ctx, s)
	defer cancel()
	if len(stop) > 0 {
		m.stop(stop)
		_ = s.ReleaseMany(ctx, stop) // on failure the claims go with the lease
	}
	if len(start) == 0 {
		return false
	}
	slices.Sort(start)
	won, held, err := s.ClaimMany(ctx, start)
	m.mu.Lock()
	if !m.dead && s.Err() == nil {
		for _, j := range won {
			m.running[j] = true
		}
		m.rec.started(m.id, won)
	}
	m.mu.Unlock()
	return err != nil || len(held) > 0
}

// stop records that the stand-in worker stopped jobs.
func (m *member) stop(jobs []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return
	}
	for _, j := range jobs {
		delete(m.running, j)
	}
	m.rec.stopped(m.id, jobs)
}

// stopAll stops every job (fencing).
func (m *member) stopAll() {
	m.mu.Lock()
	jobs := make([]string, 0, len(m.running))
	for j := range m.running {
		jobs = append(jobs, j)
	}
	m.mu.Unlock()
	m.stop(jobs)
}

// jobs returns the jobs the member runs now.
func (m *member) jobs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.running))
	for j := range m.running {
		out = append(out, j)
	}
	return out
}

// kill is SIGKILL for a simulated agent: its worker processes die with it
// (stops recorded now), and its lease is never renewed nor revoked again,
// so the server expires it after the session TTL. It returns the last
// renewal of the session it had (zero if none).
func (m *member) kill() time.Time {
	m.mu.Lock()
	jobs := make([]string, 0, len(m.running))
	for j := range m.running {
		jobs = append(jobs, j)
	}
	m.rec.stopped(m.id, jobs)
	m.running = map[string]bool{}
	m.dead = true
	s := m.session
	m.mu.Unlock()
	var last time.Time
	if s != nil {
		last = s.LastRenewal()
	}
	// Close the connection first: nothing of this member reaches etcd
	// again, not even the revoke of its session's Close.
	_ = m.client.Close()
	m.cancel()
	<-m.done
	return last
}

// leave stops the member cleanly (session closed: lease revoked).
func (m *member) leave() {
	m.cancel()
	<-m.done
	_ = m.client.Close()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
