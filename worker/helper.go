package worker

// MaybeRunHelper returns at once; callers may drop the call. Jobs used to
// start through a re-exec of the agent's binary (an "exec helper") placed in
// the job's cgroups before it exec'd the job; they are now forked straight
// into their cgroups by a launcher thread (see the package doc), so the
// binary has no helper mode left.
func MaybeRunHelper() {}
