//go:build soak

package soak

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"syscall"

	"github.com/berthd/berth/internal/testutil"
)

// A process the soak signals, by pid and start time: a pid the kernel
// gave to a newer process since is never signalled.
type target struct {
	pid   int
	start uint64
}

func targetOf(pid int) (target, bool) {
	_, start, zombie, ok := stat(pid)
	return target{pid: pid, start: start}, ok && !zombie
}

// signal sends sig to p if it is still the process it was; gone is no
// error.
func (p target) signal(sig syscall.Signal) error {
	if !liveSince(p.pid, p.start) {
		return nil
	}
	if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to pid %d: %w", sig, p.pid, err)
	}
	return nil
}

// guardOf is the lease guard of agent m: the process in its cgroup leaf
// <cgroup_root>/guard (guard.CgroupLeaf), in the first hierarchy that
// lists one.
func (m *member) guardOf() (target, error) {
	for _, h := range testutil.Hierarchies() {
		dir := filepath.Join(h, m.file.root, "guard")
		for _, pid := range testutil.ProcsUnder(dir) {
			if pid == m.proc.pid {
				continue
			}
			if p, ok := targetOf(pid); ok {
				return p, nil
			}
		}
	}
	return target{}, fmt.Errorf("agent %s: no process in its lease guard's cgroup %s/guard", m.id, m.file.root)
}

// tree is agent m's whole berth tree on its host: the agent, and every
// process in any cgroup at or below its cgroup root (the guard, every
// job's processes).
func (m *member) tree() []target {
	seen := map[int]bool{}
	var out []target
	add := func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		if p, ok := targetOf(pid); ok {
			out = append(out, p)
		}
	}
	add(m.proc.pid)
	for _, h := range testutil.Hierarchies() {
		for _, pid := range testutil.ProcsUnder(filepath.Join(h, m.file.root)) {
			add(pid)
		}
	}
	return out
}

// stopTree SIGSTOPs agent m's whole tree, as a paused VM stops: the agent
// and the guard first (they cannot react to the rest), then every job
// process, again until a pass finds none new (a fork in flight). It
// returns what it stopped.
func (m *member) stopTree() ([]target, error) {
	var stopped []target
	done := map[int]bool{}
	if g, err := m.guardOf(); err == nil {
		if err := g.signal(syscall.SIGSTOP); err != nil {
			return stopped, err
		}
		stopped, done[g.pid] = append(stopped, g), true
	}
	for pass := 0; pass < 20; pass++ {
		fresh := 0
		for _, p := range m.tree() {
			if done[p.pid] {
				continue
			}
			if err := p.signal(syscall.SIGSTOP); err != nil {
				return stopped, err
			}
			stopped, done[p.pid] = append(stopped, p), true
			fresh++
		}
		if fresh == 0 {
			return stopped, nil
		}
	}
	return stopped, fmt.Errorf("agent %s: its tree still grew after 20 passes of SIGSTOP", m.id)
}

// contAll SIGCONTs ps in random order (a resumed VM's processes run again
// in no order the soak could count on).
func contAll(rng *rand.Rand, ps []target) error {
	ps = append([]target(nil), ps...)
	rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.signal(syscall.SIGCONT))
	}
	return errors.Join(errs...)
}
