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
	"golang.org/x/sys/unix"
)

// signalRounds bounds the passes of Signal over a group it could not
// freeze and whose processes keep forking.
const signalRounds = 64

// signalFreezeTimeout bounds how long Signal waits for the group to
// freeze; a process in uninterruptible sleep can hold a freeze back.
const signalFreezeTimeout = time.Second

// Signal sends sig to every process in the group and its descendants (the
// union over every hierarchy, as Pids lists them) and returns how many it
// signalled. It is the first step of a stop in systemd's
// KillMode=control-group (systemd.kill(5)); Kill is the last.
//
// The group is frozen while the signal is sent (the v1 freezer, else
// cgroup2's cgroup.freeze: Documentation/admin-guide/cgroup-v2.rst "Core
// Interface Files"), so that no process forks meanwhile: every process is
// signalled exactly once, and a child a signal handler forks afterwards
// (a flush) is not signalled too. Signals sent to frozen processes are
// delivered when the group is thawed, which Signal always does before it
// returns. Where the group cannot be frozen in time, it lists the group
// again after each pass and signals the processes it has not signalled
// yet until a pass finds none, as systemd's cg_kill_recursive does.
//
// It does not wait for anything to exit. A process that has exited (not
// yet reaped) is no longer listed; one that exits between the listing and
// the signal is skipped (ESRCH).
//
// Errors: the group's processes cannot be listed (Pids), or a signal is
// refused for a reason other than the process being gone. Signalling a
// group that is gone signals nothing and is not an error.
func (g *Group) Signal(sig unix.Signal) (n int, err error) {
	g.runMu.Lock() // no ForkInside (a launcher thread passing through) while frozen
	defer g.runMu.Unlock()
	frozen, thaw := g.freezeForSignal()
	defer func() {
		if terr := thaw(); terr != nil && err == nil {
			err = fmt.Errorf("signal cgroup %s: %w", g.rel, terr)
		}
	}()
	return g.signalPasses(sig, frozen)
}

// SignalUnfrozen is Signal without the freeze: it lists the group again
// after each pass and signals the processes it has not signalled yet
// until a pass finds none (systemd's cg_kill_recursive), at once. It is
// the stop of a job under memory pressure: a task throttled at
// memory.high sleeps in the kernel's charge path, up to 2 s at a time
// (mm/memcontrol.c, mem_cgroup_handle_over_high), and does not reach the
// freezer until it wakes, so a freeze first would hold the signal back
// by up to Signal's freeze timeout (1 s, seen under lane 1). Errors as
// Signal's.
func (g *Group) SignalUnfrozen(sig unix.Signal) (n int, err error) {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	return g.signalPasses(sig, false)
}

// signalPasses sends sig to the group's processes: one pass when frozen,
// else passes until one finds no process not yet signalled (at most
// signalRounds). runMu held.
func (g *Group) signalPasses(sig unix.Signal, frozen bool) (n int, err error) {
	sent := map[int]bool{}
	for range signalRounds {
		pids, err := g.Pids()
		if err != nil {
			return len(sent), fmt.Errorf("signal cgroup %s: %w", g.rel, err)
		}
		fresh := 0
		for _, pid := range pids {
			if sent[pid] {
				continue
			}
			sent[pid] = true
			fresh++
			if err := unix.Kill(pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
				return len(sent), fmt.Errorf("signal cgroup %s: send %s to process %d: %w", g.rel, unix.SignalName(sig), pid, err)
			}
		}
		if frozen || fresh == 0 {
			break
		}
	}
	return len(sent), nil
}

// freezeForSignal freezes the group, through the v1 freezer when it has
// one, else through cgroup2's cgroup.freeze, and reports whether it is
// frozen; thaw undoes whatever was done, frozen or not.
func (g *Group) freezeForSignal() (frozen bool, thaw func() error) {
	ctx, cancel := context.WithTimeout(context.Background(), signalFreezeTimeout)
	defer cancel()
	if dir := g.h.v1Dir(cgroup1.Freezer, g.rel); dir != "" {
		if _, err := os.Stat(dir); err == nil {
			thaw = func() error { return setFreezerState(dir, "THAWED") }
			return freeze(ctx, dir) == nil, thaw
		}
	}
	dir := g.h.unifiedDir(g.rel)
	if dir == "" {
		return false, func() error { return nil }
	}
	file := filepath.Join(dir, "cgroup.freeze")
	if err := os.WriteFile(file, []byte("1"), 0); err != nil {
		return false, func() error { return nil } // before Linux 5.2, or gone
	}
	thaw = func() error {
		if err := os.WriteFile(file, []byte("0"), 0); err != nil && !isGone(err) && !errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("thaw %s: %w", file, err)
		}
		return nil
	}
	events := filepath.Join(dir, "cgroup.events")
	for poll := time.Millisecond; ; poll = min(2*poll, 20*time.Millisecond) {
		b, err := os.ReadFile(events)
		if err != nil {
			return false, thaw
		}
		if strings.Contains(string(b), "frozen 1") {
			return true, thaw
		}
		select {
		case <-ctx.Done():
			return false, thaw
		case <-time.After(poll):
		}
	}
}
