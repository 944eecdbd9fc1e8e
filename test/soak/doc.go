// Package soak holds berth's soak tests.
//
// They run the real agent binary, real etcd
// processes (Debian's etcd-server), real cgroups and real network
// namespaces, hammered for many rounds, with figures printed at the end.
//
//   - TestSoakAgentKills: the agent SIGKILLed at random moments (start-up,
//     claims, a reload, a stop, a restart backoff, steady running); after
//     each restart no process and no cgroup of an earlier run is left and
//     the agent's open file count is back to its baseline.
//   - TestSoakPartitions: agents in their own network namespaces cut from a
//     three-member etcd cluster (link down, or every packet dropped) while
//     other processes burn CPU, and among the cuts an agent SIGKILLed, then
//     started again at once (it adopts its jobs) or not until another agent
//     runs them (its lease guard kills them first), some while another
//     agent or the killed one is cut; the workers' own timestamps show no
//     job ever ran twice and every cut or killed agent's workers died
//     before its lease could expire on the server.
//   - TestSoakEtcd*: the etcd leader killed, one member lost, every member
//     restarted.
//   - TestSoakFull*: log_dir and data_dir on a full file system.
//   - TestSoakFencing: the proof from the job's resource: heartbeat jobs
//     that fork append every attempt with their BERTH_FENCING_TOKEN to
//     one history, under partitions (either way), agent and guard kills
//     and stops, a stalled host, etcd leader kills, upgrades and reload
//     storms, one at a time and mixed; the history is replayed as a store
//     that fences by token (package fence) and must show no stale write
//     accepted, every run with a token of its own, in order.
//
// The test files carry the build tag "soak": `make soak` runs the long form
// (100 kills, 100 partitions, 50 member kills), `make soak-short` (and
// .ci/run) the short one; `make soak-fencing` runs TestSoakFencing's
// 1,000 rounds, `make soak-fencing-short` its 50. They need root; a test skips, saying why, where the host lacks what
// it needs.
package soak
