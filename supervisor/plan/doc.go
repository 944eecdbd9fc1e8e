// Package plan decides what one pass of the agent's loop does, and does nothing.
//
// Decide turns what must run (the assignment, the definitions, the
// operators' target states and restart requests) and what runs (each
// job's phase and worker state) into a Plan: which jobs to stop and why,
// hold, start, update in place or keep on their previous definition, and
// which restart requests were handled. The supervisor's executor carries
// the plan out. Decide reads no clock, no kernel and no store, so every
// decision is a table test.
package plan
