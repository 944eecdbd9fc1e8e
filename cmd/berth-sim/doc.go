// Command berth-sim simulates a berth cluster of many members on a real etcd.
//
// It runs N lightweight members in one
// process, each running the real cluster package (its own etcd connection,
// session lease, leader campaign, per-member share watch, batched claims
// and releases, definitions read by key, fencing) with a stand-in worker
// that records starts and stops instead of forking, against a real
// three-member etcd cluster on loopback (Debian's etcd-server binary,
// three processes, data in a temporary directory).
//
// It measures a cold start (every job claimed and running), the loss of a
// member (SIGKILL-equivalent: its lease is no longer renewed) until its
// jobs run elsewhere, the loss of the leader until a new generation is
// published, the bytes each agent reads per generation, the largest etcd
// request, etcd's database size and CPU, and checks from the stand-in
// workers' records that no job ever ran twice. It exits 1 when a job ran
// twice or a phase did not finish.
//
//	go run ./cmd/berth-sim -members 100 -jobs 10000
package main
