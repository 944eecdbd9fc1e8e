package cgroup

import (
	"context"
	"errors"
	"fmt"
	"path"
)

// Cleanup kills every process in the cgroups below rel and deletes those
// cgroups from every hierarchy; rel itself stays. The agent calls it on
// start-up for each of Subtrees: whatever a previous run left there must
// not run (docs/design.md, "A job's life"; docs/cases.md C1).
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
		if err := g.Kill(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
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
