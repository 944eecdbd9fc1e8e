// Package fence judges, from the resource's side, whether berth's runs of
// a job ever wrote twice: the history format that the soak's jobs and
// fault injector append to (history.go), the checker that replays a
// history as a store that fences by token would (check.go), the figures it
// reports per fault kind (figures.go), and the reader of a run's claim file
// that a rule-following job consults before each write (claim.go).
//
// The model is the fencing token (Chubby's sequencer): every run of a job
// carries a number, strictly greater than any earlier run's of that job;
// the resource remembers the highest number it has accepted for the job
// and refuses any write with a smaller one. A zombie (a run whose claim
// lapsed but whose processes still write: a stalled host, a hung lease
// guard) is then harmless, its writes rejected. The checker fails a
// history in which that could not have held, and counts what the fence
// had to reject.
//
// The package needs no root and no berth binary: its tests run in
// `make test`; the soak that produces real histories is test/soak's
// TestSoakFencing (build tag soak).
package fence
