// Package supervisor runs the jobs the source assigns to this agent.
//
// One loop (agent.go) runs a pass whenever the source's assignment changes,
// a configuration is applied or a retry is due. A pass reads the table of
// jobs (table.go), lets package plan decide what to do (stop, hold, start,
// update in place, keep a previous definition) and hands the plan to the
// executor, which acts: it takes claims and makes cgroups and workers
// (start.go), stops them and releases claims (stop.go), writes limits in
// place (update.go) and sharing groups' cgroups (groups.go), and records
// operator actions (actions.go). Each job has one explicit phase
// (plan.Phase) with the in-place moves state.go lists. A loss of membership
// arrives as a value on Source.Lost: the agent kills every worker without
// grace (fencing) and only then lets the source join again. The API and
// the metrics read the agent through View; the agent's wiring (locks,
// listener, registry, store) is package daemon's.
package supervisor
