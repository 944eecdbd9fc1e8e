// Command scale measures the real berth agent at N jobs beside
// prometheus-process-exporter.
//
// `make bench-scale` runs it (as root), with process-exporter reading the
// same processes:
//
//	go run ./test/scale -n 100,1000,5000,10000 -bin bin/berth -csv scale.csv
//
// For each N it starts `berth agent` on a fresh cgroup root and data_dir
// with N connectors, each one job `sleep` with cpu, memory and pids limits,
// and reports: time from the agent's exec to its "joined the cluster"
// line, to ready and to all N jobs running (from the exec, and from the
// join), each against the cgroup+fork floor, beside two floors measured by
// this harness in the same run, 16 starts at a time: fork+exec (N plain
// starts of the same sleep) and cgroup+fork (N cgroups made with the jobs'
// limits through the repository's cgroup package, Hierarchy.New, and the
// sleep started into each from birth, Group.ForkInside; no agent), with the
// CPU the agent and its lease guard spent from the join to all running, and
// the descriptors each holds then; the agent's RSS and idle CPU; and, for
// the agent and for process-exporter (Debian's 0.7.10, default flags, one
// group per job), the p50 wall time of one /metrics scrape and the CPU
// each process spends per scrape, with their ratio. Both exporters are
// measured in the same run, one after the other, on the same N processes,
// so that the noise of a shared machine hits both. The tables go to standard output; -csv
// appends one line per N for the plot (test/scale/plot). An N that
// kernel.pid_max or the hard RLIMIT_NOFILE (one descriptor per job in the
// agent and in its guard) leaves no room for is skipped, with the reason.
//
// -profile DIR saves the agent's CPU and heap profiles over scrapes;
// with -start-profile D also the agent's and the lease guard's CPU
// profiles over D from the agent's start (berth agent --pprof and
// --guard-pprof, hidden flags).
package main
