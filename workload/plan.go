package workload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/berthd/berth/cluster/store"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// Plan is what Apply did (or NewPlan says Apply would do) to the stored
// workload. Every entry is "connector/NAME" or "group/NAME"; within each
// list in the order the writes are made: Created, Updated and Adopted
// groups first, then connectors, each by name; Deleted connectors first,
// then groups.
type Plan struct {
	Created   []string // definitions not in the store before
	Updated   []string // stored with another body before
	Deleted   []string // stored but not in the definitions (with prune; ApplyFile: left the agent's file, no other file holds them)
	Unchanged []string // stored with the same body already
	// Adopted (Apply) were stored with the same body by an agent's own
	// file: Apply makes them the operator's, so that no agent deletes them
	// when they leave its file.
	Adopted []string
	// Released (ApplyFile) left the agent's file but another agent's file
	// still holds them: only the agent's claim on them is dropped.
	Released []string
	// Kept (ApplyFile) are groups that left the agent's file but that a
	// stored connector still names: given up on a later apply, once unused.
	Kept []string
}

// NewPlan compares defs (config.Definitions of a file) with the workload
// stored through c and returns what Apply(ctx, c, defs, prune, host) would
// change, storing nothing. A body counts as unchanged when its bytes equal
// the stored ones (config.Definitions encodes deterministically). Stored
// definitions are checked against host.
//
// It refuses the change (returns an error, with the Plan) when the stored
// workload after it would have a definition that Parse leaves out
// but does not leave out today: without prune, a new connector whose job
// ID clashes with a stored connector's task, or a connector naming a group
// that is neither stored nor in defs. Definitions already broken in the
// store do not block an apply. It returns a store error when c cannot read
// the workload.
func NewPlan(ctx context.Context, c *store.Store, defs *config.Defs, prune bool, host *host.Host) (Plan, error) {
	var p Plan
	conns, err := c.Connectors(ctx)
	if err != nil {
		return p, fmt.Errorf("plan workload: %w", err)
	}
	groups, err := c.Groups(ctx)
	if err != nil {
		return p, fmt.Errorf("plan workload: %w", err)
	}
	diff := func(kind spec.DefKind, want, have map[string][]byte) (created, updated []string) {
		for _, name := range sortedKeys(want) {
			id := string(kind) + "/" + name
			old, ok := have[name]
			switch {
			case !ok:
				created = append(created, id)
			case !bytes.Equal(old, want[name]):
				updated = append(updated, id)
			default:
				p.Unchanged = append(p.Unchanged, id)
			}
		}
		return created, updated
	}
	gc, gu := diff(spec.DefGroup, defs.Groups, groups)
	cc, cu := diff(spec.DefConnector, defs.Connectors, conns)
	p.Created = append(gc, cc...)
	p.Updated = append(gu, cu...)
	// An unchanged definition that an agent's file stored is adopted:
	// written again, as the operator's.
	owners := map[spec.DefKind]map[string][]string{}
	for _, kind := range []spec.DefKind{spec.DefGroup, spec.DefConnector} {
		if owners[kind], err = c.FileOwners(ctx, kind); err != nil {
			return p, fmt.Errorf("plan workload: %w", err)
		}
	}
	kept := p.Unchanged[:0:0]
	for _, id := range p.Unchanged {
		kind, name, _ := strings.Cut(id, "/")
		if len(owners[spec.DefKind(kind)][name]) > 0 {
			p.Adopted = append(p.Adopted, id)
			continue
		}
		kept = append(kept, id)
	}
	p.Unchanged = kept

	afterConns, afterGroups := merged(conns, defs.Connectors, prune), merged(groups, defs.Groups, prune)
	if prune {
		for _, kind := range []spec.DefKind{spec.DefConnector, spec.DefGroup} {
			have, want := conns, defs.Connectors
			if kind == spec.DefGroup {
				have, want = groups, defs.Groups
			}
			for _, name := range sortedKeys(have) {
				if _, keep := want[name]; !keep {
					p.Deleted = append(p.Deleted, string(kind)+"/"+name)
				}
			}
		}
	}
	if err := checkAfter(conns, groups, afterConns, afterGroups, host); err != nil {
		return p, err
	}
	return p, nil
}

// checkAfter refuses a change of the stored workload (before → after)
// that leaves out a definition Parse does not leave out before: a clash or
// a missing group that the change would make. Definitions already broken
// before do not count.
func checkAfter(conns, groups, afterConns, afterGroups map[string][]byte, host *host.Host) error {
	_, before := Parse(conns, groups, host)
	_, after := Parse(afterConns, afterGroups, host)
	if after == nil {
		return nil
	}
	was := skipped(before)
	var news []error
	for _, e := range unjoin(after) {
		var d *DefinitionError
		if errors.As(e, &d) && was[string(d.Kind)+"/"+d.Name] {
			continue
		}
		news = append(news, e)
	}
	if len(news) > 0 {
		return fmt.Errorf("refuse apply: the stored workload would not validate:\n%w", errors.Join(news...))
	}
	return nil
}

// merged returns the stored bodies after writing defs: have overlaid with
// want, and only want when prune.
func merged(have, want map[string][]byte, prune bool) map[string][]byte {
	out := map[string][]byte{}
	if !prune {
		for k, v := range have {
			out[k] = v
		}
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}
