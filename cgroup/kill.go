package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// killPoll bounds the interval between checks while Kill waits for the group
// to empty.
const (
	killPollMin = 2 * time.Millisecond
	killPollMax = 50 * time.Millisecond
)

// Kill kills every process in the group and its descendants with SIGKILL and
// returns once cgroup.procs of the group and of every descendant is empty in
// every hierarchy.
//
// Where the group has a cgroup2 directory (a unified or a hybrid host) it
// writes "1" to cgroup.kill (kernel ≥ 5.14, cgroup-v2.rst "cgroup.kill"),
// which kills the whole subtree atomically, forks included. Processes the
// cgroup2 directory does not hold (on a pure v1 host, or a process written
// only into v1 cgroup.procs files) are killed by freeze, SIGKILL, thaw, in
// rounds until none is left: while FROZEN (freezer.state,
// Documentation/admin-guide/cgroup-v1/freezer-subsystem.rst) no process can
// fork, so a forking loop cannot escape.
//
// An exited process leaves cgroup.procs when it exits, before it is reaped
// (checked on kernel 6.18), so Kill does not wait for reaping; the caller
// (the agent, a child subreaper) must still reap its children or they stay
// zombies. A process in uninterruptible sleep delays Kill until it wakes.
//
// Once the group is empty, its run leaves (RunPrefix, see ForkInside) are
// removed from the cgroup2 hierarchy: the next run gets a new one, and the
// removal is then off its start path.
//
// Errors: ctx ended before the group was empty (wrapping ctx.Err(), naming
// the pids left); a control file could not be written. Killing a group that
// is gone is not an error.
func (g *Group) Kill(ctx context.Context) error {
	kill := ""
	if d := g.h.unifiedDir(g.rel); d != "" {
		kill = filepath.Join(d, "cgroup.kill")
		if err := writeKill(kill); err != nil {
			return fmt.Errorf("kill cgroup %s: %w", d, err)
		}
	}
	freezer := g.h.v1Dir(cgroup1.Freezer, g.rel)
	poll := killPollMin
	for {
		pids, err := g.Pids()
		if err != nil {
			return fmt.Errorf("kill cgroup %s: %w", g.rel, err)
		}
		if len(pids) == 0 {
			g.removeRunLeaves()
			return nil
		}
		live := livePids(pids)
		if len(live) > 0 && kill != "" {
			if err := writeKill(kill); err != nil {
				return fmt.Errorf("kill cgroup %s: %w", g.rel, err)
			}
		}
		if len(live) > 0 && (kill == "" || poll >= 8*killPollMin) {
			// cgroup.kill is absent or has not emptied the group: some
			// process is in v1 only.
			if err := g.freezeKillThaw(ctx, freezer); err != nil {
				return fmt.Errorf("kill cgroup %s: %w", g.rel, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kill cgroup %s: processes %v still inside: %w", g.rel, pids, ctx.Err())
		case <-time.After(poll):
		}
		poll = min(2*poll, killPollMax)
	}
}

// writeKill writes "1" to a cgroup.kill file; a missing group is no error.
func writeKill(file string) error {
	err := os.WriteFile(file, []byte("1"), 0)
	if err == nil || isGone(err) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return fmt.Errorf("write %s: %w", file, err)
}

// freezeKillThaw freezes the v1 freezer cgroup (when there is one), SIGKILLs
// every process listed, and thaws. The thaw always runs, so a cancelled ctx
// never leaves the group frozen.
func (g *Group) freezeKillThaw(ctx context.Context, freezer string) (err error) {
	if freezer != "" {
		if _, statErr := os.Stat(freezer); statErr != nil {
			freezer = ""
		}
	}
	if freezer != "" {
		defer func() {
			if terr := setFreezerState(freezer, "THAWED"); terr != nil && err == nil {
				err = terr
			}
		}()
		if err := freeze(ctx, freezer); err != nil {
			return err
		}
	}
	pids, err := g.Pids()
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("send SIGKILL to process %d: %w", pid, err)
		}
	}
	return nil
}

// freeze writes FROZEN and waits until freezer.state reads FROZEN or ctx
// ends.
func freeze(ctx context.Context, dir string) error {
	if err := setFreezerState(dir, "FROZEN"); err != nil {
		return err
	}
	poll := time.Millisecond
	for {
		data, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
		if err != nil {
			if isGone(err) {
				return nil
			}
			return fmt.Errorf("read %s: %w", filepath.Join(dir, "freezer.state"), err)
		}
		if strings.TrimSpace(string(data)) == "FROZEN" {
			return nil
		}
		// Re-writing FROZEN retries tasks that were not freezable yet, as
		// runc does.
		if err := setFreezerState(dir, "FROZEN"); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("freeze %s: %w", dir, ctx.Err())
		case <-time.After(poll):
		}
		poll = min(2*poll, 20*time.Millisecond)
	}
}

func setFreezerState(dir, state string) error {
	f := filepath.Join(dir, "freezer.state")
	if err := os.WriteFile(f, []byte(state), 0); err != nil && !isGone(err) && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("write %s %s: %w", state, f, err)
	}
	return nil
}

// livePids drops pids that are zombies (state Z) or already gone: signals
// cannot change them.
func livePids(pids []int) []int {
	var live []int
	for _, pid := range pids {
		p, err := procfs.NewProc(pid)
		if err != nil {
			continue
		}
		st, err := p.Stat()
		if err != nil || st.State == "Z" || st.State == "X" {
			continue
		}
		live = append(live, pid)
	}
	return live
}

// isNoProcess reports whether err says the process no longer exists.
func isNoProcess(err error) bool {
	return errors.Is(err, unix.ESRCH)
}

// removeRunLeaves removes the group's empty run leaves in cgroup2. A leaf
// that cannot be removed stays for the next ForkInside or for Delete. It
// waits for a ForkInside of this Group in progress, whose new leaf is still
// empty until its fork.
func (g *Group) removeRunLeaves() {
	ud := g.h.unifiedDir(g.rel)
	if ud == "" {
		return
	}
	g.runMu.Lock()
	defer g.runMu.Unlock()
	ents, err := os.ReadDir(ud)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), RunPrefix) {
			_ = unix.Rmdir(filepath.Join(ud, e.Name()))
		}
	}
}
