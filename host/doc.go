// Package host holds the facts of this machine that a definition is
// checked against, and the lookups a job's start makes: one place shared
// by `berth validate`, the agent's reload and the worker's start, so that a
// check that passes means the start gets past it (docs/cases.md C20).
//
// Host carries the facts (online CPUs, the block devices of io limits) and
// the checks as function hooks (a process's user, program and working
// directory; env_file, password_file and TLS files); Local assembles them
// for the running machine, LimitsOnly keeps only what a definition stored
// for the whole cluster is checked against. The lookups themselves
// (ResolveCredential, LookPath, CheckUser, FindProgram, CheckDir) are what
// package worker calls when it starts a job, and ReadEnvFile and
// ReadPasswordFile read the files of secrets as the agent does.
//
// It imports spec and limits, never config: config takes a *Host when it
// parses.
package host
