package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

func TestClaimIsExclusiveAndReleasedOnlyByItsHolder(t *testing.T) {
	name := uniqueName(t)
	ca := connect(t, shared.Endpoints(), name, nil)
	cb := connect(t, shared.Endpoints(), name, nil)
	sa := join(t, ca, assign.Member{ID: "a"})
	sb := join(t, cb, assign.Member{ID: "b"})
	ctx := ctxT(t)

	if ok, holder, err := sa.Claim(ctx, "orders-0"); !ok || holder != "a" || err != nil {
		t.Fatalf("a claims: ok=%v holder=%q err=%v", ok, holder, err)
	}
	if ok, holder, err := sa.Claim(ctx, "orders-0"); !ok || holder != "a" || err != nil {
		t.Fatalf("a claims again: ok=%v holder=%q err=%v", ok, holder, err)
	}
	if ok, holder, err := sb.Claim(ctx, "orders-0"); ok || holder != "a" || err != nil {
		t.Fatalf("b claims a's job: ok=%v holder=%q err=%v, want refused, held by a", ok, holder, err)
	}
	// b's release of a's claim does nothing.
	if err := sb.Release(ctx, "orders-0"); err != nil {
		t.Fatal(err)
	}
	if got, _ := cb.Claims(ctx); got["orders-0"] != "a" {
		t.Fatalf("claims after b's release = %v, want a still holding", got)
	}

	freed := make(chan error, 1)
	go func() { freed <- cb.WaitClaimFree(ctx, "orders-0") }()
	if err := sa.Release(ctx, "orders-0"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-freed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testutil.Deadline(5 * time.Second)):
		t.Fatal("WaitClaimFree did not return after Release")
	}
	if ok, _, err := sb.Claim(ctx, "orders-0"); !ok || err != nil {
		t.Fatalf("b claims the freed job: ok=%v err=%v", ok, err)
	}
}

func TestClaimOfOldSessionIsNotReleasedByNewOne(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	ctx := ctxT(t)
	old := join(t, c, assign.Member{ID: "a"})
	if ok, _, err := old.Claim(ctx, "orders-0"); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	// Same member ID, but the claim is bound to another lease: a Release
	// by a different session of "a" must not delete it.
	if _, err := c.etcd.Delete(ctx, c.keys.Member("a")); err != nil {
		t.Fatal(err)
	}
	fresh := join(t, c, assign.Member{ID: "a"})
	if ok, holder, err := fresh.Claim(ctx, "orders-0"); ok || holder != "a" || err != nil {
		t.Fatalf("new session claims old session's job: ok=%v holder=%q err=%v", ok, holder, err)
	}
	if err := fresh.Release(ctx, "orders-0"); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Claims(ctx); got["orders-0"] != "a" {
		t.Fatalf("claim of the old lease was released by the new session: %v", got)
	}
}

func TestClaimFreedWhenHolderLeaseEnds(t *testing.T) {
	name := uniqueName(t)
	ca := connect(t, shared.Endpoints(), name, nil)
	cb := connect(t, shared.Endpoints(), name, nil)
	sa := join(t, ca, assign.Member{ID: "a"})
	sb := join(t, cb, assign.Member{ID: "b"})
	ctx := ctxT(t)
	if ok, _, err := sa.Claim(ctx, "orders-0"); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if _, err := ca.etcd.Revoke(ctx, sa.Lease()); err != nil { // as the server does on expiry
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, testutil.Deadline(5*time.Second))
	defer cancel()
	if err := cb.WaitClaimFree(wctx, "orders-0"); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := sb.Claim(ctx, "orders-0"); !ok || err != nil {
		t.Fatalf("b claims after a's lease ended: ok=%v err=%v", ok, err)
	}
}

// ClaimMany claims what is free and reports who holds the rest, over more
// jobs than one transaction may carry; ReleaseMany releases only our own.
func TestClaimManyAndReleaseMany(t *testing.T) {
	name := uniqueName(t)
	ca := connect(t, shared.Endpoints(), name, nil)
	cb := connect(t, shared.Endpoints(), name, nil)
	sa := join(t, ca, assign.Member{ID: "a"})
	sb := join(t, cb, assign.Member{ID: "b"})
	ctx := ctxT(t)
	var jobs []string
	for i := range 300 { // > MaxTxnOps: three transactions
		jobs = append(jobs, spec.TaskID("orders", i))
	}
	if won, held, err := sa.ClaimMany(ctx, jobs[:10]); len(won) != 10 || len(held) != 0 || err != nil {
		t.Fatalf("a claims 10: won %v held %v err %v", won, held, err)
	}
	won, held, err := sb.ClaimMany(ctx, append(jobs, jobs[20])) // a duplicate counts once
	if err != nil {
		t.Fatal(err)
	}
	if len(won) != 290 || len(held) != 10 || held["orders-3"] != "a" || won[0] != "orders-10" {
		t.Fatalf("b claims 300: won %d (first %q), held %v", len(won), won[0], held)
	}
	// Claiming again what we hold is no change.
	if again, held, err := sb.ClaimMany(ctx, won[:5]); len(again) != 5 || len(held) != 0 || err != nil {
		t.Fatalf("b claims its own again: %v %v %v", again, held, err)
	}
	// b's release of all 300 leaves a's 10.
	if err := sb.ReleaseMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	claims, err := ca.Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 10 || claims["orders-9"] != "a" {
		t.Fatalf("claims after b's release: %v", claims)
	}
	holders, err := cb.Holders(ctx, []string{"orders-0", "orders-10"})
	if err != nil || len(holders) != 1 || holders["orders-0"] != "a" {
		t.Fatalf("Holders = %v, %v", holders, err)
	}
	if _, _, err := sa.ClaimMany(ctx, []string{"ok", "a/b"}); err == nil {
		t.Fatal("ClaimMany accepted a job ID with '/'")
	}
}
