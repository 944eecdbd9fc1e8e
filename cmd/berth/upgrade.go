package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/berthd/berth/api"
	"github.com/spf13/cobra"
)

func upgradeCmd(configPath *string) *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "upgrade",
		Short: "Hand the running agent's jobs to the berth now installed, without restarting a job",
		Long: `Send SIGUSR2 to the agent that runs with --config (its PID is in
<data_dir>/agent.lock, and must be the PID its API at agent.listen reports),
and wait until the program installed at the agent's path has taken over.

The agent first checks that the installed program runs (its "version"
command) and takes the configuration file (its "validate" command: an older
release without a key the file uses refuses it); then it replaces its own image with it (execve(2)): the same pid,
so a service manager sees no restart. The jobs keep running: the lease guard
is their parent and holds their runs while the new image starts; the new
agent resumes the session (same lease, same claims, same generation) and
adopts every run (same pid, start time, restart count and log file). A
hand-over the new agent cannot complete (it cannot list the guard's runs) is
logged as an error and becomes a stop and start of the jobs, never jobs left
unwatched. See docs/live-restart.md.

The .deb's upgrade runs this command, and restarts the service only when it
fails.

An agent of an earlier release (09df814 and before) at random loses the exit
status of that check to its own reaper and refuses, in its log only ("does
not run (waitid: no child processes)"). So an agent that answers with its old
image and no refusal 12 s after the signal (every release answers a signal by
then), or that reports that refusal, is signalled again, up to 4 times in
all, and the command says so on stderr.

An agent of a release before the hand-over (its GET /v1/agent has no
image_started) is not signalled: SIGUSR2 would end it; the command fails, and
the .deb then restarts the service.

The agent answers a refusal within seconds: the renewal of its session
before the exec and the lease guard's acknowledgement take at most 3 s
together, so a store that does not answer (a leader election that does not
end, a cut link) refuses the hand-over rather than stall it. When no end
has come after 5 s, the command says on stderr what the agent reports, and
waits on.

Exit status: 0 when the new agent answers with every job it found adopted,
1 when no agent runs, it predates the hand-over, it refused the hand-over
(the command prints why as soon as the agent has: the installed program
does not run, refuses the configuration file, the agent is not a member
(its session was lost and its jobs fenced), the renewal before the exec
failed or was not answered within 3 s), or the new agent did not answer
within --timeout, 2 for a bad command line.`,
		Example: `  berth upgrade
  berth upgrade -c /etc/berth/berth.toml --timeout 2m`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			pid, cl, before, err := runningAgent(ctx, cmd.ErrOrStderr(), *configPath)
			if err != nil {
				return err
			}
			if before.ImageStarted.IsZero() {
				// A release before live restart: SIGUSR2 would end it
				// without stopping its jobs in order.
				return fmt.Errorf("the agent (pid %d, version %q) predates the hand-over (it reports no image_started): not signalling; restart it instead (systemctl restart berth)", pid, before.Version)
			}
			jobs, err := cl.Jobs(ctx)
			if err != nil {
				return fmt.Errorf("the agent (pid %d) does not list its jobs: %w", pid, err)
			}
			var after api.Agent
			for attempt := 1; ; attempt++ {
				if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
					return fmt.Errorf("signal the agent (pid %d): %w", pid, err)
				}
				last := attempt == handOverTries
				after, err = waitHandOver(ctx, cmd.ErrOrStderr(), cl, before, len(jobs) > 0, !last)
				if !last && (errors.Is(err, errSilent) || (err != nil && lostCheckStatus(after.HandOverRefused))) {
					fmt.Fprintf(cmd.ErrOrStderr(), "%v: signalling again (%d of %d)\n", err, attempt+1, handOverTries)
					if after.HandOverRefused != nil {
						before.HandOverRefused = after.HandOverRefused
					}
					continue
				}
				if err != nil {
					return fmt.Errorf("%w (the agent's log says why)", err)
				}
				break
			}
			held, adopted := 0, 0
			if after.Adoption != nil {
				held, adopted = after.Adoption.Held, after.Adoption.Adopted
			}
			fmt.Fprintf(cmd.OutOrStdout(), "agent pid %d: %s -> %s; %d of %d runs adopted\n", pid, before.Version, after.Version, adopted, held)
			if adopted < held {
				return fmt.Errorf("%d runs were not adopted (the agent's log names them)", held-adopted)
			}
			return nil
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the new agent")
	return c
}

// handOverTries is how many times berth upgrade signals an agent that
// refused the hand-over because an earlier release's fault, not the new
// program, made it: in silence (errSilent) or with lostCheckStatus's
// reason. Earlier releases ran the new program's "version" check with
// os/exec while their own reaper (wait4(-1), worker/reaper.go) took every
// child's exit status, so now and then os/exec's wait found none
// (ECHILD) and the agent refused, "does not run (waitid: no child
// processes)"; the previous release (09df814) also reported no refusal
// in GET /v1/agent, only in its log. Lane 2 saw it in 2 of 6 upgrades
// from that release's package, and the .deb's fallback, a restart of
// that release, killed every job. Since then the checks run through the
// reaper (worker.Output) and a refusal is reported.
const handOverTries = 4

// silentAfter is how long after its signal an agent that still answers
// with its old image and reports no refusal has refused in silence (the
// previous release): every release bounds the hand-over's checks and the
// renewal before the exec to 10 s together, so a signal it took is
// answered by then, with an exec or a return to its work. A signal still
// queued behind a reload is not lost by another: a release of C35's fix
// drops a SIGUSR2 that waits at the exec, and handles one that waits at
// a refusal.
const silentAfter = 12 * time.Second

// errSilent is waitHandOver's error for an agent silent for silentAfter.
var errSilent = errors.New("refused in silence")

// lostCheckStatus reports whether refusal r is the ECHILD refusal
// (handOverTries) of a release that reports its refusals: nothing was
// wrong with the new program.
func lostCheckStatus(r *api.HandOverRefusal) bool {
	return r != nil && strings.Contains(r.Reason, syscall.ECHILD.Error())
}

// progressAfter is how long berth upgrade waits for the hand-over's end
// before it says what the agent reports meanwhile: the agent answers a
// refusal within 5 s (C36), so an agent still silent then is waited for
// with a word on stderr, not in silence until --timeout.
const progressAfter = 5 * time.Second

// waitHandOver polls the agent until a new image with the same pid is a
// member and, when the old one had jobs (withJobs), has reported what it
// adopted (at its first reconcile), or the agent reports a refusal newer
// than before's (GET /v1/agent hand_over_refused: the error says why), or
// ctx ends. It tells progress when the new image first answers, and once
// what the agent reports when progressAfter has passed without an end.
// With silent, an old image that answers with no refusal silentAfter
// after the signal is errSilent.
func waitHandOver(ctx context.Context, progress io.Writer, cl *api.Client, before api.Agent, withJobs, silent bool) (api.Agent, error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	seenNew, told := false, false
	var last api.Agent
	var lastErr error
	for {
		a, err := cl.Agent(ctx)
		if r := a.HandOverRefused; err == nil && r != nil && (before.HandOverRefused == nil || r.At.After(before.HandOverRefused.At)) {
			return a, fmt.Errorf("the agent (pid %d) refused the hand-over and goes on as before: %s", a.PID, r.Reason)
		}
		if err == nil {
			last = a
		}
		lastErr = err
		if err == nil && a.ImageStarted.After(before.ImageStarted) {
			if a.PID != before.PID {
				return a, fmt.Errorf("a new agent answers with pid %d, not %d: it was restarted, not handed over", a.PID, before.PID)
			}
			if a.State == "member" && (a.Adoption != nil || !withJobs) {
				return a, nil
			}
			if !seenNew {
				seenNew = true
				fmt.Fprintf(progress, "the agent (pid %d) runs %s now; waiting for it to resume its session and adopt the runs\n", a.PID, a.Version)
			}
		}
		if silent && err == nil && a.PID == before.PID && a.ImageStarted.Equal(before.ImageStarted) && time.Since(start) >= silentAfter {
			return a, fmt.Errorf("the agent (pid %d, %s) has neither handed over nor said why after %s: %w, as an earlier release does when it loses its check's exit status (its log then says \"the agent goes on as before\")", a.PID, a.Version, silentAfter, errSilent)
		}
		if !told && time.Since(start) >= progressAfter {
			told = true
			fmt.Fprintf(progress, "no end of the hand-over after %s; %s; waiting up to --timeout (the agent's log says what it waits for)\n",
				progressAfter, describeAgent(last, lastErr, before))
		}
		select {
		case <-ctx.Done():
			return api.Agent{}, fmt.Errorf("no hand-over seen: %w; %s", ctx.Err(), describeAgent(last, lastErr, before))
		case <-t.C:
		}
	}
}

// describeAgent says, for berth upgrade, what the agent last reported
// (a, or the error of the last poll, err) against what it was before the
// signal.
func describeAgent(a api.Agent, err error, before api.Agent) string {
	switch {
	case err != nil:
		return fmt.Sprintf("the agent does not answer (%v)", err)
	case a.ImageStarted.After(before.ImageStarted):
		return fmt.Sprintf("the new image (%s) is %s, adoption not reported yet", a.Version, a.State)
	default:
		return fmt.Sprintf("the old image (%s) is %s and has neither handed over nor refused", a.Version, a.State)
	}
}
