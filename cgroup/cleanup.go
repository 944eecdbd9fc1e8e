package cgroup

import (
	"context"
	"errors"
	"fmt"
	"path"
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
	names, err := h.Children(rel)
	if err != nil {
		return fmt.Errorf("clean up cgroup %q: %w", rel, err)
	}
	rel, _ = cleanRel(rel)
	var errs []error
	for _, name := range names {
		g, err := h.Load(path.Join(rel, name))
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
