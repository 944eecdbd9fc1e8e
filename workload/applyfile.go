package workload

import (
	"context"
	"fmt"
	"slices"

	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
)

// ApplyFile stores the [[connector]] and [[group]] blocks of agent's own
// file (defs) as that file's (cluster.Client.PutFileDef: created or
// updated; a definition `berth apply` stored stays the operator's), and
// gives up the definitions the file held before but no longer does
// (cluster.Client.ReleaseFileDef): deleted when no other agent's file
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
func ApplyFile(ctx context.Context, c *cluster.Client, defs *config.Defs, agent string, host *config.Host) (Plan, error) {
	var p Plan
	conns, err := c.Connectors(ctx)
	if err != nil {
		return p, fmt.Errorf("apply %s's file: %w", agent, err)
	}
	groups, err := c.Groups(ctx)
	if err != nil {
		return p, fmt.Errorf("apply %s's file: %w", agent, err)
	}
	owned := map[string][]string{}
	owners := map[string]map[string][]string{}
	for _, kind := range []string{cluster.KindConnector, cluster.KindGroup} {
		if owned[kind], err = c.FileDefs(ctx, kind, agent); err != nil {
			return p, fmt.Errorf("apply %s's file: %w", agent, err)
		}
		if owners[kind], err = c.FileOwners(ctx, kind); err != nil {
			return p, fmt.Errorf("apply %s's file: %w", agent, err)
		}
	}
	want := map[string]map[string][]byte{cluster.KindConnector: defs.Connectors, cluster.KindGroup: defs.Groups}
	have := map[string]map[string][]byte{cluster.KindConnector: conns, cluster.KindGroup: groups}

	// The stored workload after the writes: the file's definitions put,
	// the ones only this file held deleted.
	after := map[string]map[string][]byte{}
	for kind := range want {
		after[kind] = merged(have[kind], want[kind], false)
	}
	release := map[string][]string{}
	for _, kind := range []string{cluster.KindConnector, cluster.KindGroup} {
		for _, name := range owned[kind] {
			if _, still := want[kind][name]; still {
				continue
			}
			if kind == cluster.KindGroup && groupInUse(after[cluster.KindConnector], name, host) {
				p.Kept = append(p.Kept, kind+"/"+name)
				continue
			}
			release[kind] = append(release[kind], name)
			if slices.Equal(owners[kind][name], []string{agent}) {
				delete(after[kind], name)
			}
		}
	}
	if err := checkAfter(conns, groups, after[cluster.KindConnector], after[cluster.KindGroup], host); err != nil {
		return p, err
	}

	done := Plan{Kept: p.Kept}
	give := func(kind string) error {
		for _, name := range release[kind] {
			deleted, err := c.ReleaseFileDef(ctx, kind, name, agent)
			if err != nil {
				return fmt.Errorf("apply %s's file: give up %s/%s: %w", agent, kind, name, err)
			}
			if deleted {
				done.Deleted = append(done.Deleted, kind+"/"+name)
			} else {
				done.Released = append(done.Released, kind+"/"+name)
			}
		}
		return nil
	}
	put := func(kind string) error {
		for _, name := range sortedKeys(want[kind]) {
			id := kind + "/" + name
			old, existed := have[kind][name]
			if _, err := c.PutFileDef(ctx, kind, name, want[kind][name], agent); err != nil {
				return fmt.Errorf("apply %s's file: %s: %w", agent, id, err)
			}
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
		func() error { return give(cluster.KindConnector) },
		func() error { return put(cluster.KindGroup) },
		func() error { return put(cluster.KindConnector) },
		func() error { return give(cluster.KindGroup) },
	} {
		if err := step(); err != nil {
			return done, err
		}
	}
	return done, nil
}

// groupInUse reports whether a stored connector (bodies by name) names
// group.
func groupInUse(conns map[string][]byte, group string, host *config.Host) bool {
	for name, body := range conns {
		k, err := config.ParseConnector(defFile(cluster.KindConnector, name), body, host.LimitsOnly())
		if err == nil && k.Group == group {
			return true
		}
	}
	return false
}
