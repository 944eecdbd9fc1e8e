package workload

import (
	"context"
	"fmt"
	"slices"

	"github.com/berthd/berth/cluster/store"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// ApplyFile stores the [[connector]] and [[group]] blocks of agent's own
// file (defs) as that file's (store.Store.PutFileDef: created or
// updated; a definition `berth apply` stored stays the operator's), and
// gives up the definitions the file held before but no longer does
// (store.Store.ReleaseFileDef): deleted when no other agent's file
// holds them, never when `berth apply` stored them. A group that left the
// file but that a stored connector still names is kept (Plan.Kept) and
// given up on a later call, once unused.
//
// The writes are ordered as Apply's: give up connectors, put groups, put
// connectors, give up groups. Like NewPlan, it refuses (an error, nothing
// written) a change after which the stored workload would leave out a
// definition it does not leave out today. It returns the Plan of what it
// wrote (Created, Updated, Unchanged, Deleted, Released, Kept) and, after
// a store error or a refusal by the validator, the error naming the
// definition, with the Plan of what was written before it.
func ApplyFile(ctx context.Context, c *store.Store, defs *config.Defs, agent string, host *host.Host) (Plan, error) {
	var p Plan
	conns, err := c.Connectors(ctx)
	if err != nil {
		return p, fmt.Errorf("apply %s's file: %w", agent, err)
	}
	groups, err := c.Groups(ctx)
	if err != nil {
		return p, fmt.Errorf("apply %s's file: %w", agent, err)
	}
	owned := map[spec.DefKind][]string{}
	owners := map[spec.DefKind]map[string][]string{}
	for _, kind := range []spec.DefKind{spec.DefConnector, spec.DefGroup} {
		if owned[kind], err = c.FileDefs(ctx, kind, agent); err != nil {
			return p, fmt.Errorf("apply %s's file: %w", agent, err)
		}
		if owners[kind], err = c.FileOwners(ctx, kind); err != nil {
			return p, fmt.Errorf("apply %s's file: %w", agent, err)
		}
	}
	want := map[spec.DefKind]map[string][]byte{spec.DefConnector: defs.Connectors, spec.DefGroup: defs.Groups}
	have := map[spec.DefKind]map[string][]byte{spec.DefConnector: conns, spec.DefGroup: groups}

	// The stored workload after the writes: the file's definitions put,
	// the ones only this file held deleted.
	after := map[spec.DefKind]map[string][]byte{}
	for kind := range want {
		after[kind] = merged(have[kind], want[kind], false)
	}
	release := map[spec.DefKind][]string{}
	for _, kind := range []spec.DefKind{spec.DefConnector, spec.DefGroup} {
		for _, name := range owned[kind] {
			if _, still := want[kind][name]; still {
				continue
			}
			if kind == spec.DefGroup && groupInUse(after[spec.DefConnector], name, host) {
				p.Kept = append(p.Kept, string(kind)+"/"+name)
				continue
			}
			release[kind] = append(release[kind], name)
			if slices.Equal(owners[kind][name], []string{agent}) {
				delete(after[kind], name)
			}
		}
	}
	if err := checkAfter(conns, groups, after[spec.DefConnector], after[spec.DefGroup], host); err != nil {
		return p, err
	}

	done := Plan{Kept: p.Kept}
	give := func(kind spec.DefKind) error {
		for _, name := range release[kind] {
			deleted, err := c.ReleaseFileDef(ctx, kind, name, agent)
			if err != nil {
				return fmt.Errorf("apply %s's file: give up %s/%s: %w", agent, kind, name, err)
			}
			if deleted {
				done.Deleted = append(done.Deleted, string(kind)+"/"+name)
			} else {
				done.Released = append(done.Released, string(kind)+"/"+name)
			}
		}
		return nil
	}
	put := func(kind spec.DefKind) error {
		// One read and a few batched writes for the whole file: at
		// thousands of definitions, one request each is seconds of the
		// agent's start (store.Store.PutFileDefs).
		if _, err := c.PutFileDefs(ctx, kind, want[kind], agent); err != nil {
			return fmt.Errorf("apply %s's file: %w", agent, err)
		}
		for _, name := range sortedKeys(want[kind]) {
			id := string(kind) + "/" + name
			old, existed := have[kind][name]
			switch {
			case !existed:
				done.Created = append(done.Created, id)
			case string(old) != string(want[kind][name]):
				done.Updated = append(done.Updated, id)
			default:
				done.Unchanged = append(done.Unchanged, id)
			}
		}
		return nil
	}
	for _, step := range []func() error{
		func() error { return give(spec.DefConnector) },
		func() error { return put(spec.DefGroup) },
		func() error { return put(spec.DefConnector) },
		func() error { return give(spec.DefGroup) },
	} {
		if err := step(); err != nil {
			return done, err
		}
	}
	return done, nil
}

// groupInUse reports whether a stored connector (bodies by name) names
// group.
func groupInUse(conns map[string][]byte, group string, host *host.Host) bool {
	for name, body := range conns {
		k, err := config.ParseConnector(defFile(spec.DefConnector, name), body, host.LimitsOnly())
		if err == nil && k.Group == group {
			return true
		}
	}
	return false
}
