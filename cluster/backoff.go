package cluster

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Retry pacing of every store loop in this package (re-reading after a
// failed read, re-establishing a broken watch, re-trying a refused claim):
// one jittered exponential backoff, so that a thousand agents that lost etcd
// at the same moment do not come back in step.
const (
	retryInitial = 100 * time.Millisecond // first pause
	retryMax     = 2 * time.Second        // longest pause
)

// newBackoff returns a fresh backoff: 100 ms doubling to 2 s, each pause
// drawn uniformly within ±50 % of the nominal interval.
func newBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = retryInitial
	b.MaxInterval = retryMax
	b.Multiplier = 2
	b.RandomizationFactor = 0.5
	b.Reset()
	return b
}

// pause waits b's next interval or until ctx ends; it reports whether ctx
// is still live.
func pause(ctx context.Context, b *backoff.ExponentialBackOff) bool {
	return sleepCtx(ctx, b.NextBackOff())
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
