package worker

import (
	"errors"

	"golang.org/x/sys/unix"
)

// ErrStartTransient marks a start that failed for a reason that passes by
// itself (TransientStart): the worker retries it with its backoff, as it
// restarts a run that exited, instead of leaving the job failed until a
// reload.
var ErrStartTransient = errors.New("the start may succeed when tried again")

// TransientStart reports whether err, the failure of a start, is one that
// passes by itself: the agent or the lease guard was out of descriptors
// (EMFILE, ENFILE; seen at 10,000 jobs), the host or the job's cgroup out
// of processes (EAGAIN from fork(2), a pids.max reached) or memory
// (ENOMEM), or the child was killed by a signal before it could exec (the
// guard's fence, which kills every process of the jobs while a start is
// under way). A missing program, a refused permission, an unknown user
// or a bad cgroup is not: it fails the same way until the definition or
// the host changes.
func TransientStart(err error) bool {
	if errors.Is(err, ErrStartTransient) || errors.Is(err, ErrStartInterrupted) {
		return true
	}
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.EAGAIN, unix.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// transientError is an error whose text is msg, and which is
// ErrStartTransient: a start's failure known to pass, such as one the lease
// guard reports by text alone.
type transientError struct{ msg string }

func (e transientError) Error() string        { return e.msg }
func (e transientError) Is(target error) bool { return target == ErrStartTransient }

// TransientStartError is an error with text msg that TransientStart
// accepts: what a Spawner returns for a failure its far end judged
// transient.
func TransientStartError(msg string) error { return transientError{msg} }

// ErrStartInterrupted marks a start cut short by the loss of the process
// that carried it out: the lease guard exited, or was found past its
// fencing deadline (it kills every job and exits), while the start was
// under way. Nothing of the start outlives that guard (every run lives in
// its guard's PID namespace, pid_namespaces(7)), so it is tried again with
// the backoff on the next guard, as systemd and Nomad retry a start that
// failed for the host's reason, and it is not counted against
// maxStartRetries: it is not the job's failure.
var ErrStartInterrupted = errors.New("the start was cut short by the loss of the lease guard")

// interruptedError is an error whose text is msg, and which is
// ErrStartInterrupted.
type interruptedError struct{ msg string }

func (e interruptedError) Error() string        { return e.msg }
func (e interruptedError) Is(target error) bool { return target == ErrStartInterrupted }

// InterruptedStartError is an error with text msg that is
// ErrStartInterrupted: what a Spawner returns for a start its far end was
// lost during (or would have been lost during) without starting anything
// that lives on.
func InterruptedStartError(msg string) error { return interruptedError{msg} }
