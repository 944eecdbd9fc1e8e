// Package store is the key layout of a berth cluster's etcd store and the
// records kept in it that are not the leader's publication: connector and
// group definitions (with which agent files hold them), operators' target
// states and restart requests, and member records
// (docs/design.md "Membership, claims and fencing").
//
// # Key layout
//
// All keys live under the prefix "/berth/<cluster name>/" (Keys); this is
// layout 2 (cluster.Layout), the per-member assignment:
//
//	members/<id>             MemberRecord (JSON, layout 2), bound to the member's lease
//	leader/<lease hex>       election candidates, value the member ID, bound to its lease
//	                         (etcd's concurrency.Election layout; lowest create revision leads)
//	lastseen/<id>            RFC 3339 time a departed member was last seen live,
//	                         written by the leader so a new leader applies rule 5
//	connectors/<name>        a connector definition (DefRecord: TOML body + assign fields)
//	groups/<name>            a sharing group definition (DefRecord: TOML body)
//	applied/<id>             AppliedRecord: digest of agent id's file as last applied,
//	                         and the definition counts then (FileUnchanged)
//	claims/<job>             member ID of the agent that runs job, bound to its lease
//	targets/<connector>      Target: an operator's pause, resume or stop of the connector
//	restarts/<connector>/<job>  RestartRequest: a pending restart of one of its jobs
//	pub/head                 the publication head: generation, leader, counts; written last
//	pub/shares/<id>/<nnnn>   member id's share, chunk nnnn (one chunk up to 256 KiB,
//	                         about 15,000 jobs): generation, jobs, and the mod revisions
//	                         of the definitions of its connectors and groups
//	pub/status/<xx>          status bucket xx = fnv-1a(job) mod 256 in hex: unassigned jobs
//	                         and why, rule 5 holds, declarations of absent members,
//	                         static conflicts, for the jobs of that bucket
//	assignment               the single-key layout's whole assignment: written only while
//	                         agents of that layout are members
//
// The publication's values (pub/, assignment), the claims and the
// election are written and read by package cluster, which owns their
// meaning; this package names their keys only.
//
// Target states and restart requests are written only while the
// connector's definition exists, keep across updates of the definition
// (as Kafka Connect keeps a connector's target state), and are deleted
// with it.
//
// A directory that grows with the cluster (members, shares, claims,
// connectors) is read a page at a time at one revision (RangePrefix), and
// a few keys by key, MaxTxnOps per transaction (GetKeys).
//
// The package imports no berth package except assign and config (their
// vocabulary) and internal/retry (the one backoff); the TOML bodies are
// validated by a Validator the caller injects.
package store
