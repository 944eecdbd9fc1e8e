// Command berth is the berth host agent and its command-line tools.
//
//	berth agent    --config FILE   run the agent (as root; under systemd as berth.service)
//	berth validate --config FILE   check a configuration file and exit
//	berth status   [--config FILE | --addr HOST:PORT]   print the jobs of a running agent
//	berth logs     [--config FILE] [-f] [-n LINES] JOB   print a job's log
//	berth apply    [--config FILE] -f FILE [--dry-run] [--prune=false]   store the workload in the cluster
//	berth connectors [--config FILE] [--json]   list the cluster's connectors
//	berth members  [--config FILE] [--json]     list the cluster's members and the assignment
//	berth version                  print version and commit
package main

import (
	"fmt"
	"os"

	"github.com/berthd/berth/worker"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

const defaultConfig = "/etc/berth/berth.toml"

func usage() {
	fmt.Fprint(os.Stderr, `usage: berth COMMAND [FLAGS]

commands:
  agent     run the host agent                       berth agent --config /etc/berth/berth.toml
  validate  check a configuration file               berth validate --config FILE
  status    print the jobs of a running agent        berth status [--config FILE | --addr HOST:PORT]
  logs      print a job's output                     berth logs [--config FILE] [-f] [-n LINES] JOB
  apply     store connectors and groups in the cluster berth apply [--config FILE] -f connectors.toml [--dry-run]
  connectors list the cluster's connectors            berth connectors [--config FILE] [--json]
  members   list members and the assignment          berth members [--config FILE] [--json]
  version   print version and commit

Run "berth COMMAND -h" for the flags of a command.
`)
}

func main() {
	// A worker's start helper is this binary re-executed: it joins the
	// job's cgroups and execs the job. It must run before anything else.
	worker.MaybeRunHelper()

	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	args := os.Args[2:]
	var code int
	switch os.Args[1] {
	case "agent":
		code = runAgent(args)
	case "validate":
		code = runValidate(args)
	case "status":
		code = runStatus(args)
	case "logs":
		code = runLogs(args)
	case "apply":
		code = runApply(args)
	case "connectors":
		code = runConnectors(args)
	case "members":
		code = runMembers(args)
	case "version", "--version", "-v":
		fmt.Printf("berth %s (commit %s)\n", version, commit)
	case "help", "-h", "--help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "berth: unknown command %q\n", os.Args[1])
		usage()
		code = 2
	}
	os.Exit(code)
}
