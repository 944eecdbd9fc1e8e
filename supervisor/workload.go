package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/limits"
)

// This file is the glue between the TOML model (limits) and the workload
// store (cluster): the validator every store write goes through, the
// decoding of the stored workload back into limits.Workload, and "apply"
// (create, update, optionally delete definitions).

// defFile is the name under which a stored definition is parsed, so that
// its errors read "connectors/orders:3:1: task.limits.memory: ...": the
// store directory and key of the definition.
func defFile(kind, name string) string { return kind + "s/" + name }

// Validator returns the cluster.Validator that checks every connector and
// group definition before the cluster store keeps it (issue 3: "a value
// that fails validation is refused at apply, never stored"), with the same
// code that validates the agent file.
//
// For kind cluster.KindConnector it parses body with limits.ParseConnector
// and returns assign.Connector{Name, Run: has [run], Tasks, Group}; for
// cluster.KindGroup it parses body with limits.ParseGroup and returns the
// zero assign.Connector. It refuses (returns an error) with the *limits.Errors
// of the parser, each entry "connectors/NAME:LINE:COL: key: message" (or
// "groups/NAME:..."), when the body does not validate; when the body's name
// key differs from name; and for any other kind. Whether a connector's group
// exists and whether its job IDs clash with other connectors' is not checked
// here (the store holds one definition per key); ParseWorkload and
// PlanWorkload check that.
func Validator() cluster.Validator {
	return func(kind, name string, body []byte) (assign.Connector, error) {
		switch kind {
		case cluster.KindConnector:
			c, err := limits.ParseConnector(defFile(kind, name), body)
			if err != nil {
				return assign.Connector{}, err
			}
			if c.Name != name {
				return assign.Connector{}, fmt.Errorf("%s: name: %q differs from the connector's key %q", defFile(kind, name), c.Name, name)
			}
			return assign.Connector{Name: c.Name, Run: c.Run != nil, Tasks: c.Tasks, Group: c.Group}, nil
		case cluster.KindGroup:
			g, err := limits.ParseGroup(defFile(kind, name), body)
			if err != nil {
				return assign.Connector{}, err
			}
			if g.Name != name {
				return assign.Connector{}, fmt.Errorf("%s: name: %q differs from the group's key %q", defFile(kind, name), g.Name, name)
			}
			return assign.Connector{}, nil
		default:
			return assign.Connector{}, fmt.Errorf("validate %s %s: unknown kind of definition (want %q or %q)", kind, name, cluster.KindConnector, cluster.KindGroup)
		}
	}
}

// DefinitionError is one stored definition that ParseWorkload left out of
// the workload, and why.
type DefinitionError struct {
	// Kind is cluster.KindConnector or cluster.KindGroup.
	Kind string
	// Name is the definition's key in the store.
	Name string
	// Err is the parser's *limits.Errors (the body itself is invalid), a
	// *limits.Error (it clashes with the rest of the workload: a missing
	// group, a job ID used twice), or a name mismatch.
	Err error
}

// Error reads "skip connector NAME: <reason>".
func (e *DefinitionError) Error() string {
	return fmt.Sprintf("skip %s %s: %v", e.Kind, e.Name, e.Err)
}

// Unwrap returns Err.
func (e *DefinitionError) Unwrap() error { return e.Err }

// indexRef matches "connector[2] (connector \"a-0\")" in a Workload.Validate
// message; the index is into ParseWorkload's own list, so only the name is
// kept.
var indexRef = regexp.MustCompile(`connector\[\d+\] \(connector ("[^"]*")\)`)

// indexedKey matches the "connector[3]" or "group[0]" head of a
// Workload.Validate key path.
var indexedKey = regexp.MustCompile(`^(connector|group)\[(\d+)\]\.?`)

// ParseWorkload turns the stored workload (bodies by name, as
// cluster.Client.Connectors and Groups return them) back into a validated
// limits.Workload: groups and connectors each sorted by name.
//
// One bad definition does not take the others down (the agent must keep
// running the rest): it returns the workload of every definition that is
// valid, together with an error joining (errors.Join) one *DefinitionError
// per definition left out, sorted groups first, then by name. A definition
// is left out when its body does not parse (limits.ParseGroup /
// ParseConnector: wrong key, bad unit, a device missing on this host), when
// its name key differs from its store key, or when, with the rest, it breaks
// a rule of limits.Workload.Validate: a connector whose group is not in the
// workload (also when that group's own definition was left out), or a
// connector whose task job ID another connector's name already uses (the
// connector with the tasks is left out). The workload is never nil; the
// error is nil when every definition is in it.
func ParseWorkload(connectors, groups map[string][]byte) (*limits.Workload, error) {
	var bad []error
	w := &limits.Workload{}
	for _, name := range sortedKeys(groups) {
		g, err := limits.ParseGroup(defFile(cluster.KindGroup, name), groups[name])
		switch {
		case err != nil:
			bad = append(bad, &DefinitionError{Kind: cluster.KindGroup, Name: name, Err: err})
		case g.Name != name:
			bad = append(bad, &DefinitionError{Kind: cluster.KindGroup, Name: name, Err: fmt.Errorf("name %q differs from the key", g.Name)})
		default:
			w.Groups = append(w.Groups, *g)
		}
	}
	var connBad []error
	for _, name := range sortedKeys(connectors) {
		c, err := limits.ParseConnector(defFile(cluster.KindConnector, name), connectors[name])
		switch {
		case err != nil:
			connBad = append(connBad, &DefinitionError{Kind: cluster.KindConnector, Name: name, Err: err})
		case c.Name != name:
			connBad = append(connBad, &DefinitionError{Kind: cluster.KindConnector, Name: name, Err: fmt.Errorf("name %q differs from the key", c.Name)})
		default:
			w.Connectors = append(w.Connectors, *c)
		}
	}
	// Leave out the connectors that break a cross-definition rule, until
	// the rest validates. Each round removes at least one connector (a
	// group cannot break one: store keys are unique and equal to names).
	for {
		err := w.Validate()
		if err == nil {
			break
		}
		var errs *limits.Errors
		if !errors.As(err, &errs) {
			return w, fmt.Errorf("validate stored workload: %w", err)
		}
		drop := map[int]*limits.Error{}
		for _, e := range errs.List {
			m := indexedKey.FindStringSubmatch(e.Key)
			if m == nil || m[1] != "connector" {
				return w, fmt.Errorf("validate stored workload: %w", err)
			}
			i, _ := strconv.Atoi(m[2])
			if _, seen := drop[i]; !seen {
				name := w.Connectors[i].Name
				drop[i] = &limits.Error{File: defFile(cluster.KindConnector, name), Key: strings.TrimPrefix(e.Key, m[0]),
					Msg: indexRef.ReplaceAllString(e.Msg, "connector $1")}
			}
		}
		kept := w.Connectors[:0:0]
		for i, c := range w.Connectors {
			if e, ok := drop[i]; ok {
				connBad = append(connBad, &DefinitionError{Kind: cluster.KindConnector, Name: c.Name, Err: e})
				continue
			}
			kept = append(kept, c)
		}
		w.Connectors = kept
	}
	sort.SliceStable(connBad, func(i, j int) bool {
		return connBad[i].(*DefinitionError).Name < connBad[j].(*DefinitionError).Name
	})
	return w, errors.Join(append(bad, connBad...)...)
}

// skipped returns "kind/name" of every *DefinitionError joined in err.
func skipped(err error) map[string]bool {
	out := map[string]bool{}
	if err == nil {
		return out
	}
	for _, e := range unjoin(err) {
		var d *DefinitionError
		if errors.As(e, &d) {
			out[d.Kind+"/"+d.Name] = true
		}
	}
	return out
}

// unjoin returns the errors joined in err (errors.Join), or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Plan is what ApplyWorkload did (or PlanWorkload would do) to the stored
// workload. Every entry is "connector/NAME" or "group/NAME"; within each
// list in the order the writes are made: Created and Updated groups first,
// then connectors, each by name; Deleted connectors first, then groups.
type Plan struct {
	Created   []string // definitions not in the store before
	Updated   []string // stored with another body before
	Deleted   []string // stored but not in the definitions (only with prune)
	Unchanged []string // stored with the same body already
}

// PlanWorkload compares defs (limits.Definitions of a file) with the
// workload stored through c and returns what ApplyWorkload(ctx, c, defs,
// prune) would change, storing nothing. A body counts as unchanged when its
// bytes equal the stored ones (limits.Definitions encodes deterministically).
//
// It refuses the change (returns an error, with the Plan) when the stored
// workload after it would have a definition that ParseWorkload leaves out
// but does not leave out today: without prune, a new connector whose job
// ID clashes with a stored connector's task, or a connector naming a group
// that is neither stored nor in defs. Definitions already broken in the
// store do not block an apply. It returns a store error when c cannot read
// the workload.
func PlanWorkload(ctx context.Context, c *cluster.Client, defs *limits.Defs, prune bool) (Plan, error) {
	var p Plan
	conns, err := c.Connectors(ctx)
	if err != nil {
		return p, fmt.Errorf("plan workload: %w", err)
	}
	groups, err := c.Groups(ctx)
	if err != nil {
		return p, fmt.Errorf("plan workload: %w", err)
	}
	diff := func(kind string, want, have map[string][]byte) (created, updated []string) {
		for _, name := range sortedKeys(want) {
			id := kind + "/" + name
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
	gc, gu := diff(cluster.KindGroup, defs.Groups, groups)
	cc, cu := diff(cluster.KindConnector, defs.Connectors, conns)
	p.Created = append(gc, cc...)
	p.Updated = append(gu, cu...)

	afterConns, afterGroups := merged(conns, defs.Connectors, prune), merged(groups, defs.Groups, prune)
	if prune {
		for _, kind := range []string{cluster.KindConnector, cluster.KindGroup} {
			have, want := conns, defs.Connectors
			if kind == cluster.KindGroup {
				have, want = groups, defs.Groups
			}
			for _, name := range sortedKeys(have) {
				if _, keep := want[name]; !keep {
					p.Deleted = append(p.Deleted, kind+"/"+name)
				}
			}
		}
	}
	_, before := ParseWorkload(conns, groups)
	_, after := ParseWorkload(afterConns, afterGroups)
	if after != nil {
		was := skipped(before)
		var news []error
		for _, e := range unjoin(after) {
			var d *DefinitionError
			if errors.As(e, &d) && was[d.Kind+"/"+d.Name] {
				continue
			}
			news = append(news, e)
		}
		if len(news) > 0 {
			return p, fmt.Errorf("refuse apply: the stored workload would not validate:\n%w", errors.Join(news...))
		}
	}
	return p, nil
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

// ApplyWorkload makes the workload stored through c match defs: it computes
// PlanWorkload and then writes, in this order, so that no agent ever reads a
// connector whose group is missing or two connectors sharing a job ID
// (unless defs asks for it): delete the pruned connectors, put the created
// and updated groups, put the created and updated connectors, delete the
// pruned groups. Unchanged definitions are not written, so they keep their
// store revision and no agent restarts their jobs; an updated connector
// changes only its own jobs (the agents' reconcile compares jobs). Without
// prune nothing is deleted (as an agent applies its own file's blocks).
//
// c must have been connected with Config.Validate set to Validator(); every
// body is validated again by the store write. The writes are separate store
// transactions, not one: after an error the returned Plan lists only what
// was written, and the error names the definition that failed (a refusal by
// the validator, a store error). A connector or group deleted meanwhile by
// someone else is not an error. It returns PlanWorkload's errors with the
// zero Plan, having written nothing.
func ApplyWorkload(ctx context.Context, c *cluster.Client, defs *limits.Defs, prune bool) (Plan, error) {
	plan, err := PlanWorkload(ctx, c, defs, prune)
	if err != nil {
		return Plan{}, err
	}
	done := Plan{Unchanged: plan.Unchanged}
	isCreated := map[string]bool{}
	for _, id := range plan.Created {
		isCreated[id] = true
	}
	put := func(kind string) error {
		for _, id := range append(append([]string{}, plan.Created...), plan.Updated...) {
			k, name, _ := strings.Cut(id, "/")
			if k != kind {
				continue
			}
			var err error
			if kind == cluster.KindGroup {
				err = c.PutGroup(ctx, name, defs.Groups[name])
			} else {
				err = c.PutConnector(ctx, name, defs.Connectors[name])
			}
			if err != nil {
				return fmt.Errorf("apply %s: %w", id, err)
			}
			if isCreated[id] {
				done.Created = append(done.Created, id)
			} else {
				done.Updated = append(done.Updated, id)
			}
		}
		return nil
	}
	del := func(kind string) error {
		for _, id := range plan.Deleted {
			k, name, _ := strings.Cut(id, "/")
			if k != kind {
				continue
			}
			var err error
			if kind == cluster.KindGroup {
				err = c.DeleteGroup(ctx, name)
			} else {
				err = c.DeleteConnector(ctx, name)
			}
			if err != nil && !errors.Is(err, cluster.ErrNotFound) {
				return fmt.Errorf("apply: delete %s: %w", id, err)
			}
			done.Deleted = append(done.Deleted, id)
		}
		return nil
	}
	for _, step := range []func() error{
		func() error { return del(cluster.KindConnector) },
		func() error { return put(cluster.KindGroup) },
		func() error { return put(cluster.KindConnector) },
		func() error { return del(cluster.KindGroup) },
	} {
		if err := step(); err != nil {
			return done, err
		}
	}
	return done, nil
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
