// Package fencing is what berth gives a job to protect its resource from a
// stale run of the same job (docs/fencing.md): the fencing token every run
// gets in BERTH_FENCING_TOKEN, and the claim file (BERTH_CLAIM_FILE) a
// running job reads to learn until when no other run of it can start.
//
//   - A token is the store revision at which the run's claim was written
//     (cluster.Claimed): greater than every token an earlier run of the
//     job got, on any member, as long as the store's revisions never go
//     back. Record keeps, where the store's loss does not reach it
//     (<data_dir>/fencing, beside <data_dir>/etcd, not in it), the highest
//     token handed out per job and the highest store revision seen, and
//     refuses a token that would not exceed them (the store lost its data
//     or was restored from an older snapshot: BehindError). It is written
//     before the run starts, the tokens of many starts in one write (group
//     commit).
//   - ClaimFile writes, at every renewal of the agent's session, the
//     session's earliest lease expiry (last renewal sent + TTL) on the
//     jobs' CLOCK_BOOTTIME: no other run of any of the agent's jobs can
//     start before it, since another member can claim a job only once the
//     store has expired the lease.
//
// Killing every worker of an agent that lost its lease is also called
// fencing (package supervisor, source.Loss); this package does not kill.
// It imports internal/atomicfile, and go-systemd's path escaping for the
// claim file's name; daemon wires it, supervisor hands out the tokens.
package fencing
