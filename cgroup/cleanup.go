package cgroup

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
)

// maxLoggedPids is the most pids Cleanup names in a log line; beyond it
// only their count is logged.
const maxLoggedPids = 16

// Cleanup kills every process in the cgroups below rel and deletes those
// cgroups from every hierarchy; rel itself stays. The agent calls it on
// start-up for each of Subtrees: whatever a previous run left there must
// not run (docs/design.md, "A job's life"; docs/cases.md C1). Each cgroup
// it finds is logged at WARN on the hierarchy's logger (SetLogger), one
// line per cgroup: its path, how many processes it killed there and, when
// at most maxLoggedPids, their pids. An agent killed with SIGKILL outside
// systemd leaves its jobs' processes running until then.
//
// Errors: rel is invalid; a child could not be killed or deleted before ctx
// ended (all children are tried; the errors are joined).
func (h *Hierarchy) Cleanup(ctx context.Context, rel string) error {
	return h.CleanupExcept(ctx, rel, nil)
}

// CleanupExcept is Cleanup sparing the cgroups keep names (paths relative
// to the root, as New takes them: "jobs/orders-sink",
// "groups/sinks/orders-sink-0") with their processes, and the groups
// above them, below which every other cgroup is cleaned up: the runs a
// restarted agent adopts (docs/live-restart.md) survive its start-up.
func (h *Hierarchy) CleanupExcept(ctx context.Context, rel string, keep map[string]bool) error {
	names, err := h.Children(rel)
	if err != nil {
		return fmt.Errorf("clean up cgroup %q: %w", rel, err)
	}
	rel, _ = cleanRel(rel)
	var errs []error
	for _, name := range names {
		child := path.Join(rel, name)
		if keep[child] {
			continue
		}
		if aboveKept(child, keep) {
			if err := h.CleanupExcept(ctx, child, keep); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		g, err := h.Load(child)
		if errors.Is(err, ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pids, err := g.Pids()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pids = livePids(pids)
		if err := g.Kill(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		attrs := []any{"cgroup", path.Join(h.Root(), g.rel), "killed", len(pids)}
		if len(pids) > 0 && len(pids) <= maxLoggedPids {
			attrs = append(attrs, "pids", pids)
		}
		h.log.Warn("removed a cgroup an earlier run left behind", attrs...)
		if err := g.Delete(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clean up cgroup %q: %w", rel, err)
	}
	return nil
}

// aboveKept reports whether a cgroup keep names lies below rel.
func aboveKept(rel string, keep map[string]bool) bool {
	for k := range keep {
		if strings.HasPrefix(k, rel+"/") {
			return true
		}
	}
	return false
}
