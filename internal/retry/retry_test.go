package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jonboulle/clockwork"
)

// TestWaitsGrowJitteredAndBounded: successive waits roughly double, stay
// within ±50 % of the nominal value, never pass Max, and two backoffs of
// one policy do not produce the same sequence (jitter).
func TestWaitsGrowJitteredAndBounded(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	a, b := p.New(), p.New()
	nominal := p.Initial
	same := true
	for i := 0; i < 12; i++ {
		wa, wb := a.NextBackOff(), b.NextBackOff()
		if wa != wb {
			same = false
		}
		lo, hi := time.Duration(float64(nominal)*0.5), time.Duration(float64(nominal)*1.5)
		if wa < lo || wa > hi {
			t.Errorf("wait %d = %v, want within [%v, %v]", i, wa, lo, hi)
		}
		nominal = min(nominal*2, p.Max)
	}
	if same {
		t.Error("two backoffs gave the same 12 waits: no jitter")
	}
}

// TestDoRetriesOnTheInjectedClock: Do waits on the given clock (advanced
// by the test, no real sleeping), stops at success, and returns a
// permanent error at once.
func TestDoRetriesOnTheInjectedClock(t *testing.T) {
	clk := clockwork.NewFakeClock()
	tries := 0
	done := make(chan error, 1)
	go func() {
		done <- Do(context.Background(), clk, Policy{Initial: time.Second, Max: time.Minute}, func() error {
			tries++
			if tries < 3 {
				return errors.New("store down")
			}
			return nil
		}, nil)
	}()
	for i := 0; i < 2; i++ {
		if err := clk.BlockUntilContext(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
	}
	if err := <-done; err != nil || tries != 3 {
		t.Fatalf("Do = %v after %d tries, want nil after 3", err, tries)
	}

	perm := errors.New("bad limit")
	tries = 0
	err := Do(context.Background(), clk, Store(), func() error { tries++; return backoff.Permanent(perm) }, nil)
	if !errors.Is(err, perm) || tries != 1 {
		t.Fatalf("permanent: %v after %d tries, want %v after 1", err, tries, perm)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = Do(ctx, clk, Store(), func() error { return errors.New("down") }, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want context.Canceled", err)
	}
}
