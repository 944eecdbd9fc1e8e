package worker

// Prepare makes this process a child subreaper and starts the
// process-wide reaper, launcher threads and log readers that every worker
// uses; the first Start does it too. The agent calls it at start-up so that a failure shows
// before any job is touched. It returns the prctl(2) error when the
// process cannot become a subreaper, or the epoll_create1(2) error when a
// log reader cannot start.
func Prepare() error { return startLauncher() }
