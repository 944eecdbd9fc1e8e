package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"time"
)

func main() {
	var o options
	flag.IntVar(&o.members, "members", 100, "simulated agents")
	flag.IntVar(&o.jobs, "jobs", 10000, "jobs (connectors of 10 tasks each)")
	flag.DurationVar(&o.ttl, "ttl", 10*time.Second, "session TTL (whole seconds)")
	flag.BoolVar(&o.coldOnly, "cold-only", false, "measure the cold start only")
	flag.StringVar(&o.dataDir, "data", "", "directory for etcd's data (default: a new temporary directory)")
	flag.StringVar(&o.jsonOut, "json", "", "append the result as one JSON line to this file")
	flag.IntVar(&o.claimWindow, "claim-window", 0, "cluster.Config.ClaimWindow of every member (0: the default; -1: no limit)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up a phase after this long")
	flag.StringVar(&o.etcdProfile, "etcdprofile", "", "write CPU profiles of the etcd members during the cold start (first 30 s) into this directory")
	total := flag.Duration("total", 0, "give up the whole run after this long (0: no limit beyond the phases' own)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process (members and leader) to this file")
	flag.Parse()
	// The harness holds a thousand etcd clients in one process; collect
	// garbage less often (memory is plentiful) so that their goroutines,
	// not the collector, get the process's share of the two cores.
	debug.SetGCPercent(400)
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	if *total > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *total)
		defer cancel()
	}
	res, err := run(ctx, o)
	if res != nil {
		res.print(os.Stdout)
		if o.jsonOut != "" {
			if werr := appendJSON(o.jsonOut, res); werr != nil {
				fmt.Fprintln(os.Stderr, "sim:", werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func appendJSON(path string, r *result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(append(b, '\n'))
	return err
}

// errDoubleRun: the stand-in workers' records show a job run twice.
var errDoubleRun = errors.New("a job ran on two members at once")

// errClaimMismatch: at the end, who runs a job and who holds its claim in
// etcd disagree.
var errClaimMismatch = errors.New("runs and claims disagree")
