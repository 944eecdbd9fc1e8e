package cluster

import (
	"context"
	"time"

	"github.com/berthd/berth/internal/retry"
	"github.com/cenkalti/backoff/v5"
	"github.com/jonboulle/clockwork"
)

// storeLoop paces every store loop in this package (re-reading after a
// failed read, re-establishing a broken watch, re-trying a refused claim)
// with berth's one jittered exponential backoff (internal/retry): 100 ms
// doubling to 2 s, each pause within ±50 % of the nominal interval, so that
// a thousand agents that lost etcd at the same moment do not come back in
// step. It is shorter than retry.Store because a watch that breaks is
// resumed from its revision, not read again.
var storeLoop = retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second}

// newBackoff returns a fresh backoff of storeLoop.
func newBackoff() *backoff.ExponentialBackOff { return storeLoop.New() }

// pause waits b's next interval or until ctx ends; it reports whether ctx
// is still live.
func pause(ctx context.Context, b *backoff.ExponentialBackOff) bool {
	return sleepCtx(ctx, b.NextBackOff())
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	return retry.Sleep(ctx, clockwork.NewRealClock(), d)
}
