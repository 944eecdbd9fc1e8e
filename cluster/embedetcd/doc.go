// Package embedetcd runs the single-node etcd server an agent embeds when
// its [cluster] table names no endpoints (docs/design.md "Membership,
// claims and fencing"): one host works out of the box, on loopback, with
// its data under the agent's data_dir.
//
// It is apart from package cluster, which is etcd's client side only, so
// that only the code that starts an embedded store links etcd's server
// (go.etcd.io/etcd/server/v3); the CLI and workload packages do not. It
// imports no berth package.
package embedetcd
