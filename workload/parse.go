package workload

import (
	"errors"
	"fmt"
	"sort"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// DefinitionError is one stored definition that Parse left out of
// the workload, and why.
type DefinitionError struct {
	// Kind is spec.DefConnector or spec.DefGroup.
	Kind spec.DefKind
	// Name is the definition's key in the store.
	Name string
	// Err is the parser's *config.Problems (the body itself is invalid), a
	// *config.Problem (it clashes with the rest of the workload: a missing
	// group, a job ID used twice), or a name mismatch.
	Err error
}

// Error reads "skip connector NAME: <reason>".
func (e *DefinitionError) Error() string {
	return fmt.Sprintf("skip %s %s: %v", e.Kind, e.Name, e.Err)
}

// Unwrap returns Err.
func (e *DefinitionError) Unwrap() error { return e.Err }

// Parse turns the stored workload (bodies by name, as
// store.Store.Connectors and Groups return them) back into a validated
// spec.Workload, checked against host's limits facts (host.LimitsOnly():
// a definition is not left out because its user or program is missing
// here; the agent checks that before it starts or replaces a job): groups
// and connectors each sorted by name.
//
// One bad definition does not take the others down (the agent must keep
// running the rest): it returns the workload of every definition that is
// valid, together with an error joining (errors.Join) one *DefinitionError
// per definition left out, sorted groups first, then by name. A definition
// is left out when its body does not parse (config.ParseGroup /
// ParseConnector: wrong key, bad unit, a device missing on this host), when
// its name key differs from its store key, or when, with the rest, it breaks
// a rule of spec.Workload.Validate: a connector whose group is not in the
// workload (also when that group's own definition was left out), or a
// connector whose task job ID another connector's name already uses (the
// connector with the tasks is left out). Which definition a problem belongs
// to is read from the problem's Def, never from its text. The workload is
// never nil; the error is nil when every definition is in it.
func Parse(connectors, groups map[string][]byte, host *host.Host) (*spec.Workload, error) {
	host = host.LimitsOnly()
	var bad []error
	w := &spec.Workload{}
	for _, name := range sortedKeys(groups) {
		g, err := config.ParseGroup(defFile(spec.DefGroup, name), groups[name], host)
		switch {
		case err != nil:
			bad = append(bad, &DefinitionError{Kind: spec.DefGroup, Name: name, Err: err})
		case g.Name != name:
			bad = append(bad, &DefinitionError{Kind: spec.DefGroup, Name: name, Err: fmt.Errorf("name %q differs from the key", g.Name)})
		default:
			w.Groups = append(w.Groups, *g)
		}
	}
	var connBad []error
	for _, name := range sortedKeys(connectors) {
		c, err := config.ParseConnector(defFile(spec.DefConnector, name), connectors[name], host)
		switch {
		case err != nil:
			connBad = append(connBad, &DefinitionError{Kind: spec.DefConnector, Name: name, Err: err})
		case c.Name != name:
			connBad = append(connBad, &DefinitionError{Kind: spec.DefConnector, Name: name, Err: fmt.Errorf("name %q differs from the key", c.Name)})
		default:
			w.Connectors = append(w.Connectors, *c)
		}
	}
	// Leave out the connectors that break a cross-definition rule, until
	// the rest validates. Each round removes at least one connector (a
	// group cannot break one: store keys are unique and equal to names).
	for {
		err := config.ValidateWorkload(w)
		if err == nil {
			break
		}
		var ps *config.Problems
		if !errors.As(err, &ps) {
			return w, fmt.Errorf("validate stored workload: %w", err)
		}
		drop := map[string]*config.Problem{}
		for _, p := range ps.List {
			if p.Def.Kind != spec.DefConnector {
				return w, fmt.Errorf("validate stored workload: %w", err)
			}
			if _, seen := drop[p.Def.Name]; !seen {
				drop[p.Def.Name] = &config.Problem{File: defFile(spec.DefConnector, p.Def.Name), Key: p.Def.Key, Msg: p.Msg, Def: p.Def}
			}
		}
		kept := w.Connectors[:0:0]
		for _, c := range w.Connectors {
			if p, ok := drop[c.Name]; ok {
				connBad = append(connBad, &DefinitionError{Kind: spec.DefConnector, Name: c.Name, Err: p})
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
			out[string(d.Kind)+"/"+d.Name] = true
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

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
