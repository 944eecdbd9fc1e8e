package workload

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/berthd/berth/cluster/store"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// Apply makes the workload stored through c match defs, as the operator's
// (`berth apply`: no agent deletes what it writes when it leaves the
// agent's file; unchanged definitions an agent's file stored are adopted):
// it computes NewPlan and then writes, in this order, so that no agent ever reads a
// connector whose group is missing or two connectors sharing a job ID
// (unless defs asks for it): delete the pruned connectors, put the created
// and updated groups, put the created and updated connectors, delete the
// pruned groups. Unchanged definitions are not written, so they keep their
// store revision and no agent restarts their jobs; an updated connector
// changes only its own jobs (the agents' reconcile compares jobs). Without
// prune nothing is deleted (as an agent applies its own file's blocks).
//
// c must have been connected with Config.Validate set to Validator(host); every
// body is validated again by the store write. The writes are separate store
// transactions, not one: after an error the returned Plan lists only what
// was written, and the error names the definition that failed (a refusal by
// the validator, a store error). A connector or group deleted meanwhile by
// someone else is not an error. It returns NewPlan's errors with the
// zero Plan, having written nothing.
func Apply(ctx context.Context, c *store.Store, defs *config.Defs, prune bool, host *host.Host) (Plan, error) {
	plan, err := NewPlan(ctx, c, defs, prune, host)
	if err != nil {
		return Plan{}, err
	}
	done := Plan{Unchanged: plan.Unchanged}
	isCreated, isAdopted := map[string]bool{}, map[string]bool{}
	for _, id := range plan.Created {
		isCreated[id] = true
	}
	for _, id := range plan.Adopted {
		isAdopted[id] = true
	}
	put := func(kind spec.DefKind) error {
		for _, id := range append(append(append([]string{}, plan.Created...), plan.Updated...), plan.Adopted...) {
			k, name, _ := strings.Cut(id, "/")
			if spec.DefKind(k) != kind {
				continue
			}
			var err error
			if kind == spec.DefGroup {
				err = c.PutGroup(ctx, name, defs.Groups[name])
			} else {
				err = c.PutConnector(ctx, name, defs.Connectors[name])
			}
			if err != nil {
				return fmt.Errorf("apply %s: %w", id, err)
			}
			if isCreated[id] {
				done.Created = append(done.Created, id)
			} else if isAdopted[id] {
				done.Adopted = append(done.Adopted, id)
			} else {
				done.Updated = append(done.Updated, id)
			}
		}
		return nil
	}
	del := func(kind spec.DefKind) error {
		for _, id := range plan.Deleted {
			k, name, _ := strings.Cut(id, "/")
			if spec.DefKind(k) != kind {
				continue
			}
			var err error
			if kind == spec.DefGroup {
				err = c.DeleteGroup(ctx, name)
			} else {
				err = c.DeleteConnector(ctx, name)
			}
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("apply: delete %s: %w", id, err)
			}
			done.Deleted = append(done.Deleted, id)
		}
		return nil
	}
	for _, step := range []func() error{
		func() error { return del(spec.DefConnector) },
		func() error { return put(spec.DefGroup) },
		func() error { return put(spec.DefConnector) },
		func() error { return del(spec.DefGroup) },
	} {
		if err := step(); err != nil {
			return done, err
		}
	}
	return done, nil
}
