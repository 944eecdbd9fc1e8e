// Command berth is the berth host agent and its command-line tools.
//
// Its commands run the agent, check a configuration, look at a running agent and at the
// cluster, store the workload, read job logs. `berth help` lists the
// commands; `berth help COMMAND` (or `berth COMMAND -h`) explains one, with
// examples.
//
// Exit status: 0 on success, 1 when the command failed, 2 for a bad command
// line or a configuration that does not validate.
package main
