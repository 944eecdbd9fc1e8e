// Command scale measures the real berth agent at N jobs beside
// prometheus-process-exporter.
//
// `make bench-scale` runs it (as root), with process-exporter reading the
// same processes:
//
//	go run ./test/scale -n 100,1000,5000 -bin bin/berth -csv scale.csv
//
// For each N it starts `berth agent` on a fresh cgroup root and data_dir
// with N connectors, each one job `sleep` with cpu, memory and pids limits,
// and reports: time from the agent's start to its "joined the cluster"
// line, to ready and to all N jobs running, beside the fork+exec floor (N
// plain starts of the same sleep by this harness, in the same run); the
// agent's RSS and idle CPU; and, for the agent and for
// process-exporter (Debian's 0.7.10, default flags, one group per job),
// the p50 wall time of one /metrics scrape and the CPU each process spends
// per scrape, with their ratio. Both exporters are measured in the same
// run, one after the other, on the same N processes, so that the noise of
// a shared machine hits both. The table goes to standard output; -csv
// appends one line per N for the plot (test/scale/plot).
package main
