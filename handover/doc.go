// Package handover is what one agent on a data_dir hands the next (live
// restart, docs/live-restart.md), with one owner: Load reads, once at
// start and before anything is cleaned up or started, everything the
// starting agent inherits into one value, Inherited:
//
//   - the runs the lease guard holds (package guard), each checked to be
//     the process the guard started (guard.HeldRun.Verify), one per job;
//   - the jobs that waited to restart (BackoffFile), if they were written
//     beside the same guard;
//   - the session to resume (SessionFile).
//
// The first reconcile decides what each inherited run and wait becomes
// (supervisor/plan: adopted, resumed or discarded); the session is
// resumed by constructing the source with it (source.Options.Resume).
// What must persist for the agent after this one is written here too, by
// the one atomic writer (internal/atomicfile): the session as it is
// joined or resumed (SessionFile.Save) and the jobs as they enter and
// leave a backoff (Notes).
//
// It imports guard, worker, source and the plan's types; nothing but
// daemon imports it.
package handover
