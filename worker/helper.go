package worker

// MaybeRunHelper returns at once. Jobs used to start through a re-exec of
// the agent's binary (an "exec helper") placed in the job's cgroups before
// it exec'd the job; they are now forked straight into their cgroups by a
// launcher thread (see the package doc), so there is no helper mode left.
//
// Deprecated: nothing needs calling; kept so that callers still build.
func MaybeRunHelper() {}
