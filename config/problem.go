package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/berthd/berth/spec"
)

// Problem is one thing wrong in a configuration: where it is, which key,
// and what is wrong. Validation returns problems as data, so that a caller
// can act on them (drop the one definition they belong to, say) without
// reading their text.
type Problem struct {
	// File is the name the configuration was read from ("" when it came
	// from elsewhere, e.g. the cluster store).
	File string
	// Line and Col are the 1-based position of Key in File (Col counts
	// bytes); both are 0 when the position is unknown.
	Line, Col int
	// Key is the dotted TOML key path with zero-based array indices, e.g.
	// "connector[1].task.limits.memory"; "" for a TOML syntax error that
	// the parser could not tie to a key.
	Key string
	// Msg says what is wrong and, where it helps, what is allowed.
	Msg string
	// Def names the [[connector]] or [[group]] the problem belongs to; the
	// zero DefRef when it belongs to none (an [agent] key, a syntax error).
	Def DefRef

	// at is the key path the position is looked up by when Key shows a
	// name quoted (a name holding a NUL byte); "" means Key.
	at string
}

// DefRef names one workload definition and a key inside it.
type DefRef struct {
	// Kind is DefConnector or DefGroup; "" for none.
	Kind spec.DefKind
	// Name is the definition's name.
	Name string
	// Key is the key relative to the definition ("task.limits.memory",
	// "group"), as a stored definition names it.
	Key string
}

// Error formats p as "FILE:LINE:COL: key: message", dropping the parts that
// are unknown ("FILE: key: message" without a position, "key: message"
// without a file).
func (p *Problem) Error() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", p.Line, p.Col)
		}
		b.WriteString(": ")
	} else if p.Line > 0 {
		fmt.Fprintf(&b, "%d:%d: ", p.Line, p.Col)
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems is every problem found in one configuration, in file order
// (those without a position last). Every parser of this package returns a
// non-empty *Problems, never a bare *Problem, when its input does not
// validate.
type Problems struct {
	List []*Problem
}

// Error joins the problems one per line.
func (e *Problems) Error() string {
	lines := make([]string, len(e.List))
	for i, x := range e.List {
		lines[i] = x.Error()
	}
	return strings.Join(lines, "\n")
}

// problemList collects problems while a configuration is decoded.
type problemList struct {
	list []*Problem
}

// add records a problem at key.
func (l *problemList) add(key, format string, args ...any) {
	l.list = append(l.list, &Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// addQuoted records a problem of the key name in table path, shown quoted
// in Key (strconv.Quote: a name that holds a NUL byte or a newline) and
// placed at the name as written.
func (l *problemList) addQuoted(path, name, format string, args ...any) {
	l.list = append(l.list, &Problem{Key: join(path, strconv.Quote(name)), at: join(path, name), Msg: fmt.Sprintf(format, args...)})
}

// addDef records a problem of definition (kind, name), whose block is at
// path in the file ("connector[2]"), at rel inside it ("group").
func (l *problemList) addDef(kind spec.DefKind, name, path, rel, format string, args ...any) {
	key := path
	if rel != "" {
		key += "." + rel
	}
	l.list = append(l.list, &Problem{Key: key, Msg: fmt.Sprintf(format, args...),
		Def: DefRef{Kind: kind, Name: name, Key: rel}})
}

// result places every problem in file, with positions from pos, sorted by
// position; nil when there is none.
func (l *problemList) result(file string, pos *positions) error {
	if len(l.list) == 0 {
		return nil
	}
	return &Problems{List: l.placed(file, pos)}
}

// placed sets every problem's file and position (from pos) and returns
// them sorted by position, those without one last.
func (l *problemList) placed(file string, pos *positions) []*Problem {
	for _, e := range l.list {
		e.File = file
		if e.Line == 0 && pos != nil {
			at := e.Key
			if e.at != "" {
				at = e.at
			}
			e.Line, e.Col = pos.lookup(at)
		}
	}
	sort.SliceStable(l.list, func(i, j int) bool {
		a, b := l.list[i], l.list[j]
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return l.list
}

// attachDefs sets Def on every problem whose key lies in a [[connector]] or
// [[group]] block of w ("connector[2].task.limits.cpu" belongs to w's
// third connector), unless it is already set.
func (l *problemList) attachDefs(w *spec.Workload) {
	for _, p := range l.list {
		if p.Def.Kind != "" {
			continue
		}
		for _, d := range []struct {
			kind  spec.DefKind
			names func(int) (string, bool)
		}{
			{spec.DefConnector, func(i int) (string, bool) {
				if i < len(w.Connectors) {
					return w.Connectors[i].Name, true
				}
				return "", false
			}},
			{spec.DefGroup, func(i int) (string, bool) {
				if i < len(w.Groups) {
					return w.Groups[i].Name, true
				}
				return "", false
			}},
		} {
			var i int
			var rest string
			prefix := string(d.kind) + "["
			if !strings.HasPrefix(p.Key, prefix) {
				continue
			}
			if n, err := fmt.Sscanf(p.Key[len(prefix):], "%d", &i); n != 1 || err != nil {
				continue
			}
			if _, after, ok := strings.Cut(p.Key, "]"); ok {
				rest = strings.TrimPrefix(after, ".")
			}
			if name, ok := d.names(i); ok {
				p.Def = DefRef{Kind: d.kind, Name: name, Key: rest}
			}
		}
	}
}

// attachDef sets Def on every problem of a single stored definition, whose
// keys are relative to it already.
func (l *problemList) attachDef(kind spec.DefKind, name string) {
	for _, p := range l.list {
		if p.Def.Kind == "" {
			p.Def = DefRef{Kind: kind, Name: name, Key: p.Key}
		}
	}
}
