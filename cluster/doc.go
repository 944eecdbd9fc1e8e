// Package cluster is berth's membership over etcd: the session lease that
// proves an agent is a live member, leader election, the workload store, the
// publication of assignments with a generation, and job claims
// (DESIGN.md "Membership and assignment").
//
// Lifetime is a value, as in etcd's client/v3/concurrency: a *Session has a
// Done channel that closes when membership can no longer be proven, and a
// Deadline before which the server cannot have expired the lease. The caller
// (the supervisor) fences — kills its workers — when Done closes.
//
// Key layout, all under the prefix "/berth/<Config.Name>/":
//
//	members/<id>      MemberRecord (JSON), bound to the member's lease
//	leader/<lease>    election keys (concurrency.Election on "leader")
//	assignment        the published assignment (JSON, see Published)
//	lastseen/<id>     RFC 3339 time a departed member was last seen live,
//	                  written by the leader so a new leader applies rule 5
//	connectors/<name> a connector definition (JSON: TOML body + assign fields)
//	groups/<name>     a sharing group definition (JSON: TOML body)
//	claims/<job>      member ID of the agent that runs job, bound to its lease
//
// The package imports no other berth package except assign; the TOML bodies
// are validated by a Validator the caller injects.
package cluster
