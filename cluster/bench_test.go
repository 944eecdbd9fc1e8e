package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/spec"
)

// BenchmarkClaimRelease measures one claim (create-if-absent txn) plus one
// release (compare-and-delete txn) against the embedded etcd.
func BenchmarkClaimRelease(b *testing.B) {
	c := connect(b, shared.Endpoints(), uniqueName(b), nil)
	s := join(b, c, assign.Member{ID: "a"})
	ctx := context.Background()
	for b.Loop() {
		if ok, _, err := s.Claim(ctx, "orders-0"); !ok || err != nil {
			b.Fatalf("claim: %v %v", ok, err)
		}
		if err := s.Release(ctx, "orders-0"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublish measures publishing one assignment (100 jobs over 10
// members) in the leader-guarded transaction.
func BenchmarkPublish(b *testing.B) {
	c := connect(b, shared.Endpoints(), uniqueName(b), nil)
	s := join(b, c, assign.Member{ID: "a"})
	ctx := context.Background()
	l, release, err := c.campaign(ctx, s, time.Now)
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	if _, err := l.load(ctx); err != nil {
		b.Fatal(err)
	}
	a := assign.Assignment{Members: map[string][]string{}}
	for m := range 10 {
		for j := range 10 {
			id := string(rune('a'+m)) + "-member"
			a.Members[id] = append(a.Members[id], spec.TaskID("orders", m*10+j))
		}
	}
	for b.Loop() {
		if err := l.publish(ctx, a); err != nil {
			b.Fatal(err)
		}
	}
}
