package limits

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem found in a configuration.
type Error struct {
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
}

// Error formats e as "FILE:LINE:COL: key: message", dropping the parts that
// are unknown ("FILE: key: message" without a position, "key: message"
// without a file).
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", e.Line, e.Col)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "%d:%d: ", e.Line, e.Col)
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one configuration, in file order (those
// without a position last). Parse, Load and the other parsers return a
// non-empty *Errors, never a bare *Error.
type Errors struct {
	List []*Error
}

// Error joins the entries one per line.
func (e *Errors) Error() string {
	lines := make([]string, len(e.List))
	for i, x := range e.List {
		lines[i] = x.Error()
	}
	return strings.Join(lines, "\n")
}

// errorList collects problems while a configuration is decoded.
type errorList struct {
	list []*Error
}

// add records a problem at key.
func (l *errorList) add(key, format string, args ...any) {
	l.list = append(l.list, &Error{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// result places every entry in file, with positions from pos, sorted by
// position; nil when there is no problem.
func (l *errorList) result(file string, pos *positions) error {
	if len(l.list) == 0 {
		return nil
	}
	for _, e := range l.list {
		e.File = file
		if e.Line == 0 && pos != nil {
			e.Line, e.Col = pos.lookup(e.Key)
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
	return &Errors{List: l.list}
}
