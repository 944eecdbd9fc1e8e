// Package metrics serves berth's Prometheus metrics: per job, per sharing
// group and of the agent itself.
//
// It is built as node_exporter builds its own: small collectors, one per source of numbers (agent: job
// states, reloads; cgroup: kernel accounting per job; group: kernel
// accounting per sharing group; procfs: per-process counters; pressure:
// per-job PSI; cluster: membership), each read at scrape time by one method,
//
//	Update(out Output, s Snapshot) error
//
// and an Exporter that runs them and reports each one's duration and
// success (berth_scrape_collector_duration_seconds,
// berth_scrape_collector_success) instead of failing the scrape. The
// collectors read the agent only through the small Lister interface.
//
// Cost at scale. A scrape reads only what changes (the limits are those
// berth wrote), each job's files once, jobs in parallel across the cores;
// per-job samples go to a table that is written straight in the text
// exposition format (table.go) rather than through client_golang's
// Registry, whose per-sample objects, consistency hashing and sorting cost
// more than the reads at a thousand jobs. Scrapes run one at a time.
//
// Every per-job series is labelled job_id, connector, kind and group —
// never `job`, which Prometheus reserves for the scrape target. Counters
// never go down: a value that resets (a cgroup made anew, a process that
// exited) is carried over (accounting.go; failure case C12).
//
// Reference lists every family with its collector, type, labels and help;
// docs/metrics.md is generated from it (`make docs`), and a test fails when
// a family the package declares is missing from it.
package metrics
