package main

import (
	"os"
	"runtime/debug"
)

// agentGCPercent is the agent's GOGC when its environment sets none: the
// heap may grow 50 % over what was live after a collection before the
// next one starts, not Go's default 100 %. The agent's heap is mostly
// its per-job records, kept for the jobs' lives, and allocates little
// between scrapes, so collections stay rare and cheap; from 1,000 to
// 2,000 jobs it grew by about 15 KiB of resident memory per job instead
// of about 20 (BENCHMARKS.md, "Memory per job").
const agentGCPercent = 50

// tuneGC sets the agent's GC target to agentGCPercent unless the
// operator chose one: GOGC in the environment (Go's own knob, "off"
// included) wins, and GOMEMLIMIT, read by the runtime, applies as usual.
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(agentGCPercent)
	}
}
