// Package cluster is berth's membership over etcd.
//
// It holds the session lease that proves an agent is a live member, leader
// election, job claims, and the leader's computation and publication of
// assignments with a generation (docs/design.md "Membership, claims and
// fencing").
//
// Lifetime is a value, as in etcd's client/v3/concurrency: a *Session has a
// Done channel that closes when membership can no longer be proven, and a
// Deadline before which the server cannot have expired the lease. The caller
// (the supervisor) fences — kills its workers — when Done closes.
//
// # Parts
//
//   - Membership: Session (session.go, member_update.go), the election
//     (election.go) and claims (claims.go).
//   - The leader's pipeline: RunLeader reads the state and follows it
//     (leader.go, follow.go), computes with assign, plans a publication
//     with no I/O (publish_plan.go: previous publication + new assignment
//     → the writes) and commits the plan within etcd's limits and the
//     claim window (publish.go, batch.go, claimwindow.go).
//   - The publication as agents and tools read it: Share and WatchShare
//     (share.go, share_watch.go), Status (status.go), Head (head.go),
//     Assignment (assignment.go).
//   - The store's key layout and its other records (definitions, target
//     states, restart requests, member records) are package store; a
//     Client embeds a *store.Store, so its methods (PutConnector,
//     Definitions, SetTarget, Actions, Members, …) are the Client's.
//   - The embedded etcd server is package embedetcd, which this package
//     does not import: only the code that starts one links etcd's server.
//
// The keys are those of store.Keys, under "/berth/<Config.Name>/"; the
// package comment of store lists them.
//
// # Publication
//
// The leader computes the whole assignment in memory and writes only what
// changed: the shares of members whose jobs (or definition revisions)
// changed, a "departed" share for a member that left (deleted with the next
// publication), the status buckets that changed, and the head last. The
// writes are split into transactions of at most Config.MaxTxnOps operations
// and 7/8 of Config.MaxRequestBytes (etcd's --max-txn-ops and
// --max-request-bytes, 128 and 1.5 MiB by default), each guarded by the
// leader's election key (its create revision must still be the one the
// leader won with), so a deposed leader never writes over its successor. A
// share's chunks carry the generation; an agent acts on its share only when
// all its chunks agree. Shares that only lose jobs are written first. The
// order of the writes is an optimisation only: claims, not the publication,
// guarantee that no job runs twice.
//
// A new leader reads everything once, page by page at one revision; it
// then follows members, connectors and groups with watches that resume from
// their last revision when they break, and reads everything again only
// when that revision has been compacted (ErrCompacted). It waits for a
// pause in changes (100 ms, at most 1 s; for a new cluster's first
// generation 1 s, at most 10 s, as Kafka delays a new group's first
// rebalance) before it computes, so that many agents starting together make
// a few generations. A publication that hands out more new jobs than
// Config.ClaimWindow goes out in waves, each once the previous waves' jobs
// are seen claimed: claims are lease-bound writes, and a thousand members
// claiming at once queue enough of them in etcd to make lease renewals miss
// their deadlines.
//
// # What an agent reads
//
// An agent watches only its own share (WatchShare): per generation it
// reads its share (about 2 KiB for 100 jobs) if it changed, and nothing
// otherwise. The definitions it needs are those of its own jobs: the share
// carries the mod revision of every connector and group definition its
// jobs use, and the agent reads by key (Definitions) exactly those whose
// revision changed. A definition change thus reaches only the members that
// run that connector, through the leader, which watches the workload
// anyway. (The alternative, a watch per definition key in every agent,
// would put a watcher per agent per connector on etcd.) Cluster-wide views
// (the whole assignment, members, claims, status) are read by range, page
// by page at one revision (Assignment, SharesPage, Status, Members), or by
// key for a few (MembersOf, Holders); the small Head summarises a
// publication for metrics.
//
// Claims are taken and released in batches (ClaimMany, ReleaseMany): each
// claim a nested transaction create-if-absent on the member's lease, up to
// MaxTxnOps−3 of them per request (claimsPerTxn). Session renewals stay one per agent: the
// election uses the session's lease without a keep-alive of its own.
//
// # Upgrade from the single-key layout
//
// Agents of the single-key layout read the whole assignment from
// <prefix>/assignment, and their leaders write only that key. Both kinds
// take part in one election and one set of claims (the keys are the same),
// so no job runs twice in a mixed cluster. For the assignment, the leader
// writes both during an upgrade:
//
//   - A leader of this layout writes <prefix>/assignment as well, marked
//     "layout": 2, in every publication while a member record without a
//     layout (an agent of the single-key layout) is live, and deletes it
//     once none is. A value over one request is not written: the
//     single-key layout cannot hold it, and its agents keep their last
//     generation.
//   - While a leader of the single-key layout leads, agents of this layout
//     follow its unmarked <prefix>/assignment when its generation is newer
//     than their share (WatchShare), and a leader of this layout taking
//     over from it continues from that generation and rewrites every share.
//
// The package imports no other berth package except assign, config (its
// vocabulary: Protocol), cluster/store (the layout and records) and
// internal/retry (the one backoff); the TOML bodies are validated by a
// Validator the caller injects.
package cluster
