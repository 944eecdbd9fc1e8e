package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

// modRevision reads the claim key of job: its mod_revision and
// create_revision, what a fencing token is checked against in etcd.
func modRevision(t *testing.T, c *Client, job string) (mod, created int64) {
	t.Helper()
	resp, err := c.etcd.Get(ctxT(t), c.keys.Claim(job))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the claim of %s: %v %v", job, resp, err)
	}
	return resp.Kvs[0].ModRevision, resp.Kvs[0].CreateRevision
}

// A created claim's revision is its key's mod and create revision; each
// guarded re-put (RenewClaim) gets a greater one, the key's new
// mod_revision, under the same create_revision; a claim another member
// holds, or nobody, cannot be renewed.
func TestClaimRevisionsAreTheClaimKeysRevisions(t *testing.T) {
	name := uniqueName(t)
	ca := connect(t, shared.Endpoints(), name, nil)
	cb := connect(t, shared.Endpoints(), name, nil)
	sa := join(t, ca, assign.Member{ID: "a"})
	sb := join(t, cb, assign.Member{ID: "b"})
	ctx := ctxT(t)

	seenBefore := sa.Seen()
	won, held, err := sa.ClaimRuns(ctx, []string{"j1", "j2"}, nil)
	if err != nil || len(won) != 2 || len(held) != 0 {
		t.Fatalf("claim: won %v held %v err %v", won, held, err)
	}
	for _, c := range won {
		mod, created := modRevision(t, ca, c.Job)
		if c.Revision != mod || c.Created != created || c.Revision != c.Created {
			t.Errorf("%s: claimed at %d (created %d), the key says mod %d created %d", c.Job, c.Revision, c.Created, mod, created)
		}
		if c.Seen < seenBefore || c.Revision <= c.Seen {
			t.Errorf("%s: seen %d before a write at %d (the session had seen %d)", c.Job, c.Seen, c.Revision, seenBefore)
		}
	}
	if won[0].Revision != won[1].Revision {
		t.Errorf("one transaction, two revisions: %+v", won)
	}
	if sa.Seen() < won[0].Revision {
		t.Errorf("the session saw %d after writing at %d", sa.Seen(), won[0].Revision)
	}

	prev := won[0]
	for range 3 {
		r, err := sa.RenewClaim(ctx, "j1")
		if err != nil {
			t.Fatal(err)
		}
		mod, created := modRevision(t, ca, "j1")
		if r.Revision <= prev.Revision || r.Revision != mod || r.Created != created || created != won[0].Created {
			t.Fatalf("renewed at %d (created %d) after %d; the key says mod %d created %d", r.Revision, r.Created, prev.Revision, mod, created)
		}
		prev = r
	}

	if _, err := sb.RenewClaim(ctx, "j1"); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("b renews a's claim: %v, want ErrClaimLost", err)
	}
	if _, err := sa.RenewClaim(ctx, "nobody-claimed-this"); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("renew of an absent claim: %v, want ErrClaimLost", err)
	}
	// A's claim is untouched by b's attempt.
	if mod, _ := modRevision(t, ca, "j1"); mod != prev.Revision {
		t.Fatalf("a's claim rewritten at %d by b's failed renewal (was %d)", mod, prev.Revision)
	}
}

// A claim that already is this session's (the session resumed) is re-put
// by ClaimRuns when renew names its job, so the job's next run gets a
// revision of its own, and only read otherwise (an adopted run keeps its
// token): Revision 0, the create_revision of the claim it runs under.
func TestClaimRunsRenewsOnlyWhatItIsAsked(t *testing.T) {
	name := uniqueName(t)
	ttl := func(c *Config) { c.SessionTTL = 10 * time.Second }
	old := connect(t, shared.Endpoints(), name, ttl)
	m := assign.Member{ID: "a", Protocol: spec.ProtocolStatic}
	s1, err := old.Join(ctxT(t), m, "127.0.0.1:1111")
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := s1.ClaimRuns(ctxT(t), []string{"new-run", "adopted"}, nil)
	if err != nil || len(first) != 2 {
		t.Fatalf("claims: %v %v", first, err)
	}
	next, s2 := resumeAfterDeath(t, old, s1, name, m, ttl)
	if s2.Seen() < first[0].Revision {
		t.Fatalf("the resumed session has seen %d, below the claims' %d", s2.Seen(), first[0].Revision)
	}
	won, held, err := s2.ClaimRuns(ctxT(t), []string{"new-run", "adopted", "fresh"}, func(j string) bool { return j != "adopted" })
	if err != nil || len(won) != 3 || len(held) != 0 {
		t.Fatalf("claims after resume: won %v held %v err %v", won, held, err)
	}
	got := map[string]Claimed{}
	for _, c := range won {
		got[c.Job] = c
	}
	mod, created := modRevision(t, next, "new-run")
	if c := got["new-run"]; c.Revision <= first[0].Revision || c.Revision != mod || c.Created != created || created != first[0].Created {
		t.Errorf("new-run: %+v; the key: mod %d created %d; first claimed at %d", c, mod, created, first[0].Revision)
	}
	mod, created = modRevision(t, next, "adopted")
	if c := got["adopted"]; c.Revision != 0 || c.Created != first[1].Created || mod != first[1].Revision {
		t.Errorf("adopted: %+v, want no write under create_revision %d; the key: mod %d created %d", c, first[1].Created, mod, created)
	}
	mod, created = modRevision(t, next, "fresh")
	if c := got["fresh"]; c.Revision != mod || c.Created != created || c.Revision != got["new-run"].Revision {
		t.Errorf("fresh: %+v; the key: mod %d created %d", c, mod, created)
	}
}

// Two members that take one job's claim in turn, each restarting its run
// a few times under it (RenewClaim) before it releases the claim, while
// the other tries to take and renew it all along, never hand out one
// token twice, and every token is greater than every earlier one, as the
// holders got them.
func TestTokensOfOneJobNeverRepeatAcrossMembers(t *testing.T) {
	name := uniqueName(t)
	sessions := []*Session{
		join(t, connect(t, shared.Endpoints(), name, nil), assign.Member{ID: "a"}),
		join(t, connect(t, shared.Endpoints(), name, nil), assign.Member{ID: "b"}),
	}
	const rounds, restarts = 40, 3
	var (
		mu     sync.Mutex
		tokens []int64 // in the order their holders got them
		turns  = map[string]int{}
		last   string // the member that held the claim last
	)
	hand := func(id string, rev int64) {
		mu.Lock()
		defer mu.Unlock()
		tokens = append(tokens, rev)
		turns[id]++
		last = id
	}
	othersTurn := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return last != id
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Deadline(60*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(sessions))
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := s.Member().ID
			for range rounds {
				won, _, err := s.ClaimRuns(ctx, []string{"job"}, func(string) bool { return true })
				if err != nil {
					errs[i] = err
					return
				}
				if len(won) == 0 {
					// The other holds it: a renewal must fail.
					if _, err := s.RenewClaim(ctx, "job"); err == nil {
						// It may have been released and taken by us in
						// between only through ClaimRuns, which this is not.
						errs[i] = fmt.Errorf("%s renewed a claim it did not take", id)
						return
					} else if !errors.Is(err, ErrClaimLost) {
						errs[i] = err
						return
					}
					continue
				}
				hand(id, won[0].Revision)
				for range restarts {
					r, err := s.RenewClaim(ctx, "job")
					if err != nil {
						errs[i] = err
						return
					}
					hand(id, r.Revision)
				}
				if err := s.Release(ctx, "job"); err != nil {
					errs[i] = err
					return
				}
				// Give the other member its chance at the claim (it takes
				// turns with this one unless it has finished its rounds).
				testutil.Poll(200*time.Millisecond, func() bool { return othersTurn(id) })
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if turns["a"] == 0 || turns["b"] == 0 {
		t.Fatalf("the claim never changed hands: %v", turns)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d (%d) after %d: not greater; all: %v", i, tokens[i], tokens[i-1], tokens)
		}
	}
	t.Logf("%d tokens, turns %v", len(tokens), turns)
}

// Renewing many claims at once stays within etcd's --max-txn-ops, which
// counts a nested transaction's operations against what its parent left
// (etcd's checkTxnRequest: the budget of a nested request is the limit
// less its parent's widest branch): a full batch of renewals, three levels
// deep, was refused with "too many operations in txn request".
func TestClaimRunsRenewsAFullBatch(t *testing.T) {
	name := uniqueName(t)
	c := connect(t, shared.Endpoints(), name, nil)
	s, err := c.Join(ctxT(t), assign.Member{ID: "a", Protocol: spec.ProtocolStatic}, "127.0.0.1:1111")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	jobs := make([]string, 3*c.cfg.MaxTxnOps)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("job-%04d", i)
	}
	first, _, err := s.ClaimRuns(ctxT(t), jobs, nil)
	if err != nil || len(first) != len(jobs) {
		t.Fatalf("first claims: %d of %d, %v", len(first), len(jobs), err)
	}
	won, held, err := s.ClaimRuns(ctxT(t), jobs, func(string) bool { return true })
	if err != nil || len(won) != len(jobs) || len(held) != 0 {
		t.Fatalf("renewed claims: won %d of %d, held %v, err %v", len(won), len(jobs), held, err)
	}
	for _, w := range won {
		if w.Revision <= first[len(first)-1].Revision {
			t.Fatalf("claim %s renewed at revision %d, not after the first claims (%d)", w.Job, w.Revision, first[len(first)-1].Revision)
		}
	}
}

// A resumed session's claims that are only to be read (an adoption of
// thousands of runs) are read by read-only transactions: ClaimRuns of 300
// claims it holds (three batches), one another member holds and one that
// nobody holds makes one raft entry, the write transaction of the last
// two: the held one is reported
// held, the absent one created; the 300 are reported ours at their
// create_revision, unwritten.
func TestResumedClaimsAreReadWithoutAWrite(t *testing.T) {
	name := uniqueName(t)
	ttl := func(c *Config) { c.SessionTTL = 10 * time.Second }
	old := connect(t, shared.Endpoints(), name, ttl)
	m := assign.Member{ID: "a", Protocol: spec.ProtocolStatic}
	s1, err := old.Join(ctxT(t), m, "127.0.0.1:1111")
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for i := range 300 {
		mine = append(mine, fmt.Sprintf("job-%d", i))
	}
	first, _, err := s1.ClaimRuns(ctxT(t), mine, nil)
	if err != nil || len(first) != len(mine) {
		t.Fatalf("claims: %d of %d, %v", len(first), len(mine), err)
	}
	created := map[string]int64{}
	for _, c := range first {
		created[c.Job] = c.Created
	}
	other := join(t, connect(t, shared.Endpoints(), name, ttl), assign.Member{ID: "b", Protocol: spec.ProtocolStatic})
	if ok, _, err := other.Claim(ctxT(t), "theirs"); !ok || err != nil {
		t.Fatalf("b's claim: %v %v", ok, err)
	}
	next, s2 := resumeAfterDeath(t, old, s1, name, m, ttl)
	// Every write transaction is a raft entry, whether it writes or not;
	// a read-only one is not (etcd serves it by a read index).
	raftIndex := func() uint64 {
		st, err := next.etcd.Status(ctxT(t), shared.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		return st.RaftIndex
	}
	before := raftIndex()
	won, held, err := s2.ClaimRuns(ctxT(t), append(append([]string{}, mine...), "theirs", "absent"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if after := raftIndex(); after != before+1 {
		t.Errorf("the raft index went from %d to %d: want one write transaction, for the claims not already ours", before, after)
	}
	if held["theirs"] != "b" || len(held) != 1 {
		t.Errorf("held %v, want theirs held by b", held)
	}
	got := map[string]Claimed{}
	for _, c := range won {
		got[c.Job] = c
	}
	if len(won) != len(mine)+1 || got["absent"].Revision == 0 {
		t.Fatalf("won %d claims (absent: %+v), want the %d held and absent created", len(won), got["absent"], len(mine))
	}
	for _, j := range mine {
		if c := got[j]; c.Revision != 0 || c.Created != created[j] {
			t.Errorf("%s: %+v, want unwritten under create_revision %d", j, c, created[j])
			break
		}
	}
}
