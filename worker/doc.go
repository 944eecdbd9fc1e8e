// Package worker runs one job's process, and all its descendants, inside
// that job's cgroup.
//
// It is where a job's process is born and where it dies.
//
// Birth. A worker's main process never runs outside its cgroup, not even for
// a moment, and nothing of the agent's is charged to the job. Every start
// runs on a launcher thread: one of a few goroutines (four per P, 2 to
// 16) each locked to its OS thread until its Runtime closes, so that
// starts proceed in parallel. The thread calls the group's ForkInside
// (cgroup.Group), which:
//
//   - on v1 and hybrid hosts moves the thread alone into the job's cgroup in
//     every v1 controller (a v1 tasks file takes one thread:
//     Documentation/admin-guide/cgroup-v1/cgroups.rst), so that the child,
//     which inherits the forking thread's cgroups, is born inside; the
//     thread moves back to the agent's cgroups right after;
//   - on cgroup v2, and in the cgroup2 tracking tree of a hybrid host, clones
//     the child straight into a new leaf below the job's cgroup with
//     clone3(CLONE_INTO_CGROUP) (SysProcAttr.UseCgroupFD; cgroup-v2.rst).
//     The job's limits stay on the job's cgroup and cover the leaf; every
//     run gets a fresh leaf because some kernels (seen on 6.18) SIGKILL any
//     child cloned into a cgroup that was once killed through cgroup.kill,
//     which is how a run's leftovers are killed, while a cgroup made after
//     the kill starts clean;
//   - while a launcher thread sits in a job's v1 pids cgroup it counts in
//     pids.current there and in every berth group above, so pids.max of each
//     such level is raised by one for the thread after it enters and
//     lowered before it leaves: a single-process job runs with pids = 1, and
//     the job's own processes never get more room than their limit.
//
// The fork is syscall.ForkExec: the child sets its session, parent-death
// signal and credentials and execs the job, and an exec error (missing
// program, not executable, bad working directory) comes back from the
// fork. A child that dies before its new image runs — killed at birth,
// say — looks like a success to ForkExec, so its PF_FORKNOEXEC flag
// (/proc/PID/stat) is checked before it can be reaped, and a child still
// inside execve is watched until the exec completes or the child dies. Any of these failures, and a cgroup that
// refuses the thread or the fork (a v1 cpuset without CPUs, pids.max
// reached), is a start that never ran the job: the worker goes to Failed
// with the reason, never Running then Exited.
//
// A job with a user of its own starts from a second pool of launcher
// threads, each of which has set no_new_privs and emptied its capability
// bounding set before forking anything (confineThread; both are per thread,
// inherited by the child and kept across execve): the child switches to the
// user and only the user's own groups (initgroups(3)), the kernel then
// empties its permitted and effective capabilities, and nothing the job
// executes can give it a privilege again, setuid programs included.
//
// The launcher threads never unlock, and end only when their Runtime
// closes after the last worker has ended, for two reasons: a
// child's Pdeathsig fires when the thread that forked it exits, not when
// the agent does (prctl(2) PR_SET_PDEATHSIG, "the parent" being the thread
// that created the child); and the Go
// runtime clones new OS threads only from unlocked threads (a locked one
// hands the job to its template thread), so no runtime thread is ever born
// inside a job's cgroup while a launcher thread is there. The agent's pid
// shows in a v1 cgroup.procs file while one of its threads passes through;
// cgroup.Group's process lists leave it out, so Kill never signals the
// agent.
//
// Death. The agent is a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER)
// and one process-wide reaper collects every child with wait4(-1): the exit
// status of a worker's main process goes to its worker, orphans reparented to
// the agent are reaped silently. When the main process ends, the rest of the
// cgroup is killed; Stop sends KillSignal to what KillMode names (every
// process of the cgroup by default), waits up to StopTimeout for them, then
// kills whatever is left in the cgroup.
//
// Many at once. A worker holds no goroutine while its job runs or waits to
// restart: its steps (a run's start, the main process's exit, a stop, a
// grace period or backoff ending) run when their event comes, one at a
// time per worker. Job output is read by a few log readers
// (epoll over every job's pipe, one shared buffer), so a job that writes
// nothing costs neither a goroutine nor a buffer. Starts run on several
// launcher threads at once, and forks are not serialised by the reaper: it
// holds back an exited child it does not know while a fork that may have
// made it is in flight (waitid(2) WNOWAIT), rather than locking out every
// other start while a child execs.
//
// Owner. The reaper, the launcher threads and the log readers belong to a
// Runtime: the program that starts the agent makes it (StartRuntime),
// gives it to every worker (Spec.Runtime) and closes it after the last
// worker has ended; Close stops them and waits for them. Runtimes open at
// once share the one reaper.
//
// Contract for the program that uses this package: it must not start other
// children with os/exec or os.Process.Wait, because the reaper's wait4(-1)
// would steal their exit status.
package worker
