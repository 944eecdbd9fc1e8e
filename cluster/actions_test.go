package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/berthd/berth/internal/testutil"
	"github.com/berthd/berth/spec"
)

// Target states and restart requests: written only while the connector
// exists, read at one revision, a request removed only by the one that
// carried it out, both deleted with the connector, and every change
// signalled by WatchActions.
func TestActionsStore(t *testing.T) {
	c := connect(t, shared.Endpoints(), uniqueName(t), nil)
	ctx := ctxT(t)
	now := time.Now().UTC()
	if err := c.SetTarget(ctx, "orders", Target{State: spec.TargetPaused, By: "test", At: now}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetTarget of a missing connector = %v, want ErrNotFound", err)
	}
	if err := c.RequestRestarts(ctx, "orders", []string{"orders-0"}, false, "test", now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RequestRestarts of a missing connector = %v, want ErrNotFound", err)
	}
	if err := c.PutConnector(ctx, "orders", []byte("tasks = 2\n")); err != nil {
		t.Fatal(err)
	}
	watch := c.WatchActions(ctx)
	<-watch // the first signal: read afresh
	if err := c.SetTarget(ctx, "orders", Target{State: spec.TargetPaused, By: "test", At: now}); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, watch)
	if err := c.RequestRestarts(ctx, "orders", []string{"orders-0", "orders-1"}, true, "cli root@h", now); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, watch)
	a, err := c.Actions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tg := a.Targets["orders"]; tg.State != spec.TargetPaused || tg.By != "test" || !tg.At.Equal(now) {
		t.Errorf("target = %+v", tg)
	}
	r0, r1 := a.Restarts["orders-0"], a.Restarts["orders-1"]
	if len(a.Restarts) != 2 || r0.Connector != "orders" || !r0.OnlyFailed || r0.By != "cli root@h" || r0.Rev == 0 {
		t.Fatalf("restarts = %+v", a.Restarts)
	}
	// A later request for orders-0 survives the removal of the earlier one.
	if err := c.RequestRestarts(ctx, "orders", []string{"orders-0"}, false, "again", now); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartDone(ctx, r0); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartDone(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartDone(ctx, r1); err != nil {
		t.Fatalf("removing a removed request: %v", err)
	}
	a, err = c.Actions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Restarts) != 1 || a.Restarts["orders-0"].By != "again" {
		t.Errorf("restarts after RestartDone = %+v, want only the later orders-0", a.Restarts)
	}
	// An update of the definition keeps the target state.
	if err := c.PutConnector(ctx, "orders", []byte("tasks = 3\n")); err != nil {
		t.Fatal(err)
	}
	if a, err = c.Actions(ctx); err != nil || a.Targets["orders"].State != spec.TargetPaused {
		t.Errorf("target after an update = %+v, %v", a.Targets, err)
	}
	if err := c.DeleteConnector(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	waitSignal(t, watch)
	if a, err = c.Actions(ctx); err != nil || len(a.Targets) != 0 || len(a.Restarts) != 0 {
		t.Errorf("after delete: %+v, %v", a, err)
	}
}

// waitSignal waits up to 10 s for a signal on ch.
func waitSignal(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testutil.Deadline(10 * time.Second)):
		t.Fatal("no signal from WatchActions within 10s")
	}
}
