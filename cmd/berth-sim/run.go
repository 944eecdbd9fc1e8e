package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berthd/berth/cluster"
)

// options are the command line.
type options struct {
	members, jobs int
	ttl           time.Duration
	coldOnly      bool
	dataDir       string
	jsonOut       string
	timeout       time.Duration
	etcdProfile   string
	claimWindow   int
}

// sim is one run: etcd, the members, and the harness's own view.
type sim struct {
	o       options
	etcd    *etcdCluster
	cfg     cluster.Config
	watcher *cluster.Client // the harness's client: workload, heads, checks
	traffic *cluster.Traffic
	rec     *recorder

	mu           sync.Mutex
	members      map[string]*member
	deadLargest  int64           // largest request of the killed members
	deadFencings int             // sessions the killed members had lost
	heads        []headSeen      // every head the harness saw, in order
	pubs         []pubSeen       // every publication a leader reported
	renewals     []time.Duration // round trips of session renewals since the last phase began
}

// renewalStats returns the p50, p99 and max renewal round trip since the
// last call, and resets them.
func (s *sim) renewalStats() [3]float64 {
	s.mu.Lock()
	r := s.renewals
	s.renewals = nil
	s.mu.Unlock()
	if len(r) == 0 {
		return [3]float64{}
	}
	slices.Sort(r)
	q := func(f float64) float64 { return r[int(f*float64(len(r)-1))].Seconds() * 1000 }
	return [3]float64{q(0.5), q(0.99), q(1)}
}

// pubSeen is what a leader reported of one publication, and when.
type pubSeen struct {
	stats cluster.PublishStats
	at    time.Time
}

// headSeen is a publication head and when the harness saw it.
type headSeen struct {
	head cluster.Head
	at   time.Time
}

func run(ctx context.Context, o options) (*result, error) {
	dir := o.dataDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "berth-sim-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	e, err := startEtcd(dir)
	if err != nil {
		return nil, err
	}
	defer e.stop()
	s := &sim{o: o, etcd: e, rec: newRecorder(), members: map[string]*member{}, traffic: &cluster.Traffic{}}
	s.cfg = cluster.Config{Name: "sim", Endpoints: e.Endpoints, SessionTTL: o.ttl, Validate: validate, ClaimWindow: o.claimWindow,
		OnRenew: func(d time.Duration) {
			s.mu.Lock()
			s.renewals = append(s.renewals, d)
			s.mu.Unlock()
		},
		OnPublish: func(p cluster.PublishStats) {
			s.mu.Lock()
			s.pubs = append(s.pubs, pubSeen{stats: p, at: time.Now()})
			s.mu.Unlock()
		}}
	wcfg := s.cfg
	wcfg.Traffic = s.traffic
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	s.watcher, err = cluster.Connect(cctx, wcfg)
	cancel()
	if err != nil {
		return nil, err
	}
	defer s.watcher.Close()
	res := &result{Members: o.members, Jobs: o.jobs, TTLSeconds: o.ttl.Seconds(), Date: time.Now().UTC().Format(time.RFC3339),
		ClaimWindow: o.claimWindow,
		LoadBefore:  loadAverage()}
	defer func() {
		res.LoadAfter = loadAverage()
		res.Fencings = 0
		for _, m := range s.all() {
			res.Fencings += int(m.fencings.Load())
		}
		res.Fencings += s.deadFencings
		s.rec.mu.Lock()
		for _, n := range s.rec.notes {
			fmt.Fprintln(os.Stderr, "sim: note:", n)
		}
		s.rec.mu.Unlock()
	}()
	hctx, stopHeads := context.WithCancel(ctx)
	headsDone := make(chan struct{})
	go func() {
		defer close(headsDone)
		for h := range s.watcher.WatchHead(hctx) {
			s.mu.Lock()
			s.heads = append(s.heads, headSeen{head: h, at: time.Now()})
			s.mu.Unlock()
		}
	}()
	defer func() {
		stopHeads()
		<-headsDone
	}()
	defer s.leaveAll()

	if res.Anchor, err = anchor(ctx, e, o.members, o.jobs, o.ttl); err != nil {
		return res, err
	}
	t := time.Now()
	if err := storeWorkload(ctx, s.watcher, o.jobs); err != nil {
		return nil, fmt.Errorf("store workload: %w", err)
	}
	res.StoreSeconds = time.Since(t).Seconds()

	// Every phase ends with every job running (its wait) and is then
	// checked for double runs, so a failing phase fails the run at once.
	phases := []phase{{"cold start", func() error { return s.coldStart(ctx, res) }}}
	if !o.coldOnly {
		phases = append(phases,
			phase{"steady after the cold start", func() error { return s.steady(ctx) }},
			phase{"member lost", func() error { return s.loss(ctx, res, false) }},
			phase{"steady after the member loss", func() error { return s.steady(ctx) }},
			phase{"leader lost", func() error { return s.loss(ctx, res, true) }},
			phase{"steady after the leader loss", func() error { return s.steady(ctx) }})
	}
	for _, p := range phases {
		if err := p.run(); err != nil {
			return res, fmt.Errorf("%s: %w", p.name, err)
		}
		if err := s.rec.checkDoubles(); err != nil {
			return res, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return res, s.finish(ctx, res)
}

// phase is one step of a run: it returns once every job runs again, or an
// error when it does not within the phase timeout.
type phase struct {
	name string
	run  func() error
}

// coldStart starts every member at once and waits until every job runs.
func (s *sim) coldStart(ctx context.Context, res *result) error {
	cpu0, _ := s.etcd.cpu()
	self0 := selfCPU()
	s.renewalStats()
	if s.o.etcdProfile != "" {
		defer s.etcd.profile(s.o.etcdProfile, 30*time.Second)()
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, s.o.members)
	for i := range s.o.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("agent%04d", i)
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			m, err := newMember(cctx, id, s.cfg, s.rec)
			cancel()
			if err != nil {
				errs <- fmt.Errorf("member %s: %w", id, err)
				return
			}
			s.mu.Lock()
			s.members[id] = m
			s.mu.Unlock()
			go m.run()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	// Done when every member has joined, the latest generation names them
	// all, and every member runs exactly its share: every job running where
	// the assignment puts it, none still to move.
	var joinedAt time.Time
	err := s.until(ctx, "every job running", func() bool {
		all := s.joined() == s.o.members
		if all && joinedAt.IsZero() {
			joinedAt = time.Now()
		}
		if !all || s.rec.count() != s.o.jobs || s.lastHead().Members != s.o.members {
			return false
		}
		for _, m := range s.all() {
			if !m.settled() {
				return false
			}
		}
		return true
	})
	res.Cold.JoinedSeconds = joinedAt.Sub(t0).Seconds()
	res.Cold.Seconds = time.Since(t0).Seconds()
	if err != nil {
		return err
	}
	heads := s.headsSince(t0)
	if len(heads) > 0 {
		res.Cold.FirstGenerationSeconds = heads[0].at.Sub(t0).Seconds()
		res.Cold.Generations = len(heads)
	}
	res.Cold.Publications = s.pubsSince(t0)
	cpu1, _ := s.etcd.cpu()
	res.Cold.EtcdCPUSeconds = (cpu1 - cpu0).Seconds()
	res.Cold.SimCPUSeconds = (selfCPU() - self0).Seconds()
	res.Cold.Starts = s.rec.starts()
	res.Cold.RenewMillis = s.renewalStats()
	var per []float64
	leader := s.lastHead().Leader
	for _, m := range s.all() {
		if m.id == leader {
			res.Cold.LeaderBytes = m.traffic.Received()
			continue
		}
		per = append(per, float64(m.traffic.Received()))
	}
	res.Cold.BytesPerAgentMedian, res.Cold.BytesPerAgentMax = median(per), maxOf(per)
	res.Cold.DBBytes, _ = s.etcd.dbSize(ctx)
	return nil
}

// steady waits until every job runs and no generation has been published
// for two seconds.
func (s *sim) steady(ctx context.Context) error {
	return s.until(ctx, "steady state", func() bool {
		if s.rec.count() != s.o.jobs {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.heads) > 0 && time.Since(s.heads[len(s.heads)-1].at) > 2*time.Second
	})
}

// loss kills one member — the leader, or another member with jobs — and
// measures until a new generation is published and until all its jobs run
// elsewhere.
func (s *sim) loss(ctx context.Context, res *result, ofLeader bool) error {
	head := s.lastHead()
	var victim *member
	if ofLeader {
		victim = s.member(head.Leader)
	} else {
		for _, m := range s.all() {
			if m.id != head.Leader && len(m.jobs()) > 0 {
				victim = m
				break
			}
		}
	}
	if victim == nil {
		return fmt.Errorf("no member to kill (leader %q)", head.Leader)
	}
	jobs := victim.jobs()
	p := &lossPhase{Victim: victim.id, Jobs: len(jobs)}
	if ofLeader {
		res.LeaderLoss = p
	} else {
		res.MemberLoss = p
	}
	before := map[string][2]int64{}
	for _, m := range s.all() {
		before[m.id] = [2]int64{m.traffic.Received(), m.sharesSeen()}
	}
	cpu0, _ := s.etcd.cpu()
	s.renewalStats()
	t0 := time.Now()
	lastRenewal := victim.kill()
	s.mu.Lock()
	delete(s.members, victim.id)
	s.deadFencings += int(victim.fencings.Load())
	s.deadLargest = max(s.deadLargest, victim.traffic.LargestSent())
	s.mu.Unlock()
	expiry := lastRenewal.Add(s.o.ttl)
	var genAt time.Time
	err := s.until(ctx, "a new generation", func() bool {
		for _, h := range s.headsSince(t0) {
			if h.head.Generation > head.Generation && (!ofLeader || h.head.Leader != victim.id) {
				genAt = h.at
				p.NewLeader = h.head.Leader
				return true
			}
		}
		return false
	})
	if err != nil {
		return err
	}
	p.ToGenerationSeconds = genAt.Sub(t0).Seconds()
	defer func() { p.Publications = s.pubsSince(t0) }()
	err = s.until(ctx, "the lost member's jobs running elsewhere", func() bool {
		for _, j := range jobs {
			if h := s.rec.holder(j); h == "" || h == victim.id {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	p.ToRunningSeconds = time.Since(t0).Seconds()
	p.AfterExpirySeconds = time.Since(expiry).Seconds()
	p.LeaseLeftSeconds = expiry.Sub(t0).Seconds()
	cpu1, _ := s.etcd.cpu()
	p.EtcdCPUSeconds = (cpu1 - cpu0).Seconds()
	p.RenewMillis = s.renewalStats()
	gens := int64(s.lastHead().Generation - head.Generation)
	p.Generations = int(gens)
	leader := s.lastHead().Leader
	var changed, unchanged []float64
	for _, m := range s.all() {
		b := before[m.id]
		got := float64(m.traffic.Received()-b[0]) / float64(max(gens, 1))
		switch {
		case m.id == leader:
			p.LeaderBytes = int64(got)
		case m.sharesSeen() > b[1]:
			changed = append(changed, got)
		default:
			unchanged = append(unchanged, got)
		}
	}
	p.SharesChanged, p.SharesUnchanged = len(changed), len(unchanged)
	p.BytesChangedMedian, p.BytesChangedMax = median(changed), maxOf(changed)
	p.BytesUnchangedMax = maxOf(unchanged)
	p.DBBytes, _ = s.etcd.dbSize(ctx)
	return nil
}

// finish checks the stand-in workers' records for double runs, compares
// who runs what with the claims in etcd, and collects the totals.
func (s *sim) finish(ctx context.Context, res *result) error {
	doubles, running := check(s.rec.snapshot())
	res.DoubleRuns = len(doubles)
	claims, err := s.watcher.Claims(ctx)
	if err != nil {
		return err
	}
	for j, m := range running {
		if claims[j] != m {
			res.ClaimMismatches++
		}
	}
	res.ClaimMismatches += max(0, len(claims)-len(running))
	res.LargestRequestBytes = s.traffic.LargestSent()
	for _, m := range s.all() {
		res.LargestRequestBytes = max(res.LargestRequestBytes, m.traffic.LargestSent())
	}
	res.LargestRequestBytes = max(res.LargestRequestBytes, s.deadLargest)
	res.DBBytes, _ = s.etcd.dbSize(ctx)
	if len(doubles) > 0 {
		for _, d := range doubles[:min(10, len(doubles))] {
			fmt.Fprintln(os.Stderr, "double run:", d)
		}
		return fmt.Errorf("%d double runs: %w", len(doubles), errDoubleRun)
	}
	if res.ClaimMismatches > 0 {
		return fmt.Errorf("%d jobs run without their member's claim, or claimed and not run: %w", res.ClaimMismatches, errClaimMismatch)
	}
	return nil
}

// until polls cond every 10 ms, for at most the phase timeout; it prints
// progress to stderr every 5 s.
func (s *sim) until(ctx context.Context, what string, cond func() bool) error {
	start := time.Now()
	deadline := start.Add(s.o.timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	progress := start.Add(5 * time.Second)
	for !cond() {
		if now := time.Now(); now.After(progress) {
			progress = now.Add(5 * time.Second)
			h := s.lastHead()
			cpu, _ := s.etcd.cpu()
			fmt.Fprintf(os.Stderr, "sim: %s: %.0f s: %d of %d members joined, %d of %d jobs running, generation %d by %s, etcd CPU %.0f s\n",
				what, now.Sub(start).Seconds(), s.joined(), s.o.members, s.rec.count(), s.o.jobs, h.Generation, h.Leader, cpu.Seconds())
		}
		if lost := s.fencings(); lost > 2*s.o.members {
			return fmt.Errorf("%s: %d sessions lost by live members (the machine cannot keep their leases; see the renewal round trips): giving up", what, lost)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %s (%d of %d jobs running, %d of %d members joined)",
				s.o.timeout, what, s.rec.count(), s.o.jobs, s.joined(), s.o.members)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (s *sim) all() []*member {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*member, 0, len(s.members))
	for _, m := range s.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (s *sim) member(id string) *member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members[id]
}

// fencings counts the sessions that live members lost.
func (s *sim) fencings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.deadFencings
	for _, m := range s.members {
		n += int(m.fencings.Load())
	}
	return n
}

// joined counts the members with a live session (no sorting: it is polled
// on every job start).
func (s *sim) joined() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.members {
		if m.joined.Load() {
			n++
		}
	}
	return n
}

func (s *sim) lastHead() cluster.Head {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.heads) == 0 {
		return cluster.Head{}
	}
	return s.heads[len(s.heads)-1].head
}

// pubsSince summarises the publications reported since t.
func (s *sim) pubsSince(t time.Time) []publication {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []publication
	for _, p := range s.pubs {
		if p.at.Before(t) {
			continue
		}
		out = append(out, publication{Generation: p.stats.Generation, AtSeconds: p.at.Sub(t).Seconds(),
			ComputeMillis: float64(p.stats.Compute.Microseconds()) / 1000, WriteMillis: float64(p.stats.Write.Microseconds()) / 1000,
			Shares: p.stats.Shares, Buckets: p.stats.Buckets, Transactions: p.stats.Transactions, Bytes: p.stats.Bytes})
	}
	return out
}

// loadAverage is the first field of /proc/loadavg: how busy the machine
// was (other work shares these two cores).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

func (s *sim) headsSince(t time.Time) []headSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []headSeen
	for _, h := range s.heads {
		if !h.at.Before(t) {
			out = append(out, h)
		}
	}
	return out
}

// leaveAll stops every member cleanly, 64 at a time.
func (s *sim) leaveAll() {
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for _, m := range s.all() {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			m.leave()
			<-sem
		}()
	}
	wg.Wait()
}

// selfCPU is this process's CPU time (user + system).
func selfCPU() time.Duration {
	d, _ := cpuTime(os.Getpid())
	return d
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
