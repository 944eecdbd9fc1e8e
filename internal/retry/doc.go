// Package retry is the one backoff berth waits with before it tries a
// failed store call, kill or start again.
//
// It is a jittered exponential backoff
// (github.com/cenkalti/backoff/v5's ExponentialBackOff, randomization
// factor 0.5) on an injectable clock (github.com/jonboulle/clockwork), so
// that a thousand agents that lost etcd together do not retry together,
// and tests can advance time instead of sleeping.
package retry
