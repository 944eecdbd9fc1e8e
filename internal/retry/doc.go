// Package retry is the one way berth waits before trying a failed store
// call, kill or start again: a jittered exponential backoff
// (github.com/cenkalti/backoff/v5's ExponentialBackOff, randomization
// factor 0.5) on an injectable clock (github.com/jonboulle/clockwork), so
// that a thousand agents that lost etcd together do not retry together,
// and tests can advance time instead of sleeping.
package retry
