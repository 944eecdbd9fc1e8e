// Package test holds berth's end-to-end tests.
//
// They build the real binary, run `berth agent` as a child process against
// real cgroups, a real etcd (embedded, or Debian's etcd-server) and real
// Prometheus, tmux, shells and Chromium where a test needs them, and read
// the agent's HTTP API, its logs and /proc. They need root; a test skips,
// saying why, where the host lacks what it needs. `make build` first: the
// tests use bin/berth of the repository.
package test
