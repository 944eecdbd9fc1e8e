package retry

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jonboulle/clockwork"
)

// Policy shapes a backoff: the first wait is about Initial, each next one
// about Multiplier times the previous, never above Max; every wait is
// randomized by ±50 % (backoff's RandomizationFactor 0.5).
type Policy struct {
	Initial time.Duration
	Max     time.Duration
}

// Store is the policy of every retry of a call to etcd (connect, join,
// campaign, watch, claim): 250 ms doubling to 10 s.
func Store() Policy { return Policy{Initial: 250 * time.Millisecond, Max: 10 * time.Second} }

// Kill is the policy of a kill that must be repeated until a cgroup is
// empty: 50 ms doubling to 2 s.
func Kill() Policy { return Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second} }

// New returns a fresh backoff of p: an ExponentialBackOff that never stops
// (no maximum elapsed time: the caller's context bounds it).
func (p Policy) New() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = p.Initial
	b.MaxInterval = p.Max
	b.Multiplier = 2
	b.RandomizationFactor = 0.5
	b.Reset()
	return b
}

// Sleep waits d on clk and reports true, or returns false as soon as ctx
// ends.
func Sleep(ctx context.Context, clk clockwork.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-ctx.Done():
		return false
	}
}

// Do runs op until it returns nil, a permanent error (wrapped with
// backoff.Permanent: returned unwrapped at once), or ctx ends (the last
// error of op is returned, joined with ctx's). Between tries it waits the
// next backoff of p on clk; notify, when set, is told each error and the
// wait that follows (to log it).
func Do(ctx context.Context, clk clockwork.Clock, p Policy, op func() error, notify func(err error, wait time.Duration)) error {
	b := p.New()
	for {
		err := op()
		if err == nil {
			return nil
		}
		var perm *backoff.PermanentError
		if errors.As(err, &perm) {
			return perm.Err
		}
		wait := b.NextBackOff()
		if notify != nil {
			notify(err, wait)
		}
		if !Sleep(ctx, clk, wait) {
			return errors.Join(err, ctx.Err())
		}
	}
}

// Claim is the policy of a job that waits for another member to release
// its claim: 100 ms doubling to 2 s, so that a moved job starts soon after
// its old owner let it go.
func Claim() Policy { return Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second} }
