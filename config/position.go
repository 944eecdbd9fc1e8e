package config

import (
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// positions maps indexed key paths ("connector[1].task.limits.memory") to
// their line and column in a TOML document.
//
// BurntSushi/toml v1.6 keeps key positions private and, for arrays of
// tables, under the unindexed key only (the last [[connector]] wins), so
// this file scans the document itself. The scan runs only on documents the
// library has already parsed, and its result is cross-checked against
// MetaData.Keys(): on any disagreement no position is reported at all
// rather than a wrong one.
type positions struct {
	at map[string][2]int
}

// lookup returns the position of key or, failing that, of its nearest
// ancestor that has one; 0, 0 when none has.
func (p *positions) lookup(key string) (line, col int) {
	if p == nil {
		return 0, 0
	}
	for key != "" {
		if lc, ok := p.at[key]; ok {
			return lc[0], lc[1]
		}
		cut := strings.LastIndexAny(key, ".[")
		if cut < 0 {
			break
		}
		key = key[:cut]
	}
	return 0, 0
}

// under returns the positions of table and of the keys below it only (a
// copy; nil stays nil): what is kept past parsing.
func (p *positions) under(table string) *positions {
	if p == nil {
		return nil
	}
	kept := &positions{at: map[string][2]int{}}
	for k, lc := range p.at {
		if k == table || strings.HasPrefix(k, table+".") || strings.HasPrefix(k, table+"[") {
			kept.at[strings.Clone(k)] = lc
		}
	}
	return kept
}

// locate scans data and returns the position of every key, or nil when the
// scan does not agree with keys (md.Keys() of the same document).
func locate(data string, keys []toml.Key) (p *positions) {
	defer func() {
		if recover() != nil {
			p = nil
		}
	}()
	s := &scanner{src: data, line: 1, col: 1, at: map[string][2]int{}, arrays: map[string]int{}}
	s.document()
	if len(s.order) != len(keys) {
		return nil
	}
	for i, k := range keys {
		if toml.Key(s.order[i]).String() != k.String() {
			return nil
		}
	}
	return &positions{at: s.at}
}

// scanner walks a valid TOML document and records where each key starts.
type scanner struct {
	src       string
	i         int
	line, col int
	at        map[string][2]int
	order     [][]string     // unindexed keys, in the order of MetaData.Keys()
	arrays    map[string]int // elements seen per array of tables (indexed path)
	ctx       string         // indexed path of the current table
	ctxPlain  []string       // unindexed path of the current table
}

func (s *scanner) eof() bool { return s.i >= len(s.src) }

func (s *scanner) peek(off int) byte {
	if s.i+off < len(s.src) {
		return s.src[s.i+off]
	}
	return 0
}

func (s *scanner) advance() {
	if s.eof() {
		return
	}
	if s.src[s.i] == '\n' {
		s.line++
		s.col = 1
	} else {
		s.col++
	}
	s.i++
}

func (s *scanner) mark(path string) {
	if _, ok := s.at[path]; !ok {
		s.at[path] = [2]int{s.line, s.col}
	}
}

// skip passes spaces and tabs and, when newlines is set, newlines and
// comments too.
func (s *scanner) skip(newlines bool) {
	for !s.eof() {
		switch c := s.peek(0); {
		case c == ' ' || c == '\t':
			s.advance()
		case newlines && (c == '\n' || c == '\r'):
			s.advance()
		case newlines && c == '#':
			for !s.eof() && s.peek(0) != '\n' {
				s.advance()
			}
		default:
			return
		}
	}
}

func join(base, k string) string {
	if base == "" {
		return k
	}
	return base + "." + k
}

func (s *scanner) document() {
	for !s.eof() {
		start := s.i
		s.skip(true)
		if s.eof() {
			return
		}
		line, col := s.line, s.col
		if s.peek(0) == '[' {
			array := s.peek(1) == '['
			s.advance()
			if array {
				s.advance()
			}
			parts := s.keyParts()
			for !s.eof() && s.peek(0) == ']' {
				s.advance()
			}
			path := ""
			for j, part := range parts {
				path = join(path, part)
				if array && j == len(parts)-1 {
					n := s.arrays[path]
					s.arrays[path] = n + 1
					path += "[" + strconv.Itoa(n) + "]"
				} else if n, ok := s.arrays[path]; ok {
					path += "[" + strconv.Itoa(n-1) + "]"
				}
			}
			s.at[path] = [2]int{line, col}
			s.ctx, s.ctxPlain = path, parts
			s.order = append(s.order, parts)
		} else {
			s.keyValue(s.ctx, s.ctxPlain, line, col)
		}
		// Rest of the line: spaces, a comment.
		s.skip(false)
		if !s.eof() && s.peek(0) == '#' {
			for !s.eof() && s.peek(0) != '\n' {
				s.advance()
			}
		}
		if s.i == start {
			s.advance()
		}
	}
}

// keyValue scans "key = value" whose key starts at line:col inside the
// table at ctx (indexed) / plain (unindexed).
func (s *scanner) keyValue(ctx string, plain []string, line, col int) {
	parts := s.keyParts()
	if len(parts) == 0 {
		s.advance()
		return
	}
	path := ctx
	for _, part := range parts {
		path = join(path, part)
	}
	s.at[path] = [2]int{line, col}
	full := append(append([]string{}, plain...), parts[len(parts)-1])
	if len(parts) > 1 {
		full = append(append([]string{}, plain...), parts...)
	}
	s.order = append(s.order, full)
	s.skip(false)
	if s.peek(0) == '=' {
		s.advance()
	}
	s.skip(false)
	s.value(path, full)
}

// keyParts reads a dotted key up to "=" or "]".
func (s *scanner) keyParts() []string {
	var parts []string
	for !s.eof() {
		s.skip(false)
		switch c := s.peek(0); {
		case c == '"' || c == '\'':
			start := s.i
			s.str()
			raw := s.src[start:s.i]
			if c == '"' {
				if u, err := strconv.Unquote(raw); err == nil {
					raw = u
				} else {
					raw = raw[1 : len(raw)-1]
				}
			} else {
				raw = strings.Trim(raw, "'")
			}
			parts = append(parts, raw)
		case isBare(c):
			start := s.i
			for !s.eof() && isBare(s.peek(0)) {
				s.advance()
			}
			parts = append(parts, s.src[start:s.i])
		default:
			return parts
		}
		s.skip(false)
		if s.peek(0) != '.' {
			return parts
		}
		s.advance()
	}
	return parts
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// str passes one string of any of TOML's four kinds.
func (s *scanner) str() {
	q := s.peek(0)
	multi := s.peek(1) == q && s.peek(2) == q
	if multi {
		s.advance()
		s.advance()
		s.advance()
		for !s.eof() {
			if q == '"' && s.peek(0) == '\\' {
				s.advance()
				s.advance()
				continue
			}
			if s.peek(0) == q && s.peek(1) == q && s.peek(2) == q {
				s.advance()
				s.advance()
				s.advance()
				// Up to two more quotes belong to the content.
				for n := 0; n < 2 && s.peek(0) == q; n++ {
					s.advance()
				}
				return
			}
			s.advance()
		}
		return
	}
	s.advance()
	for !s.eof() {
		c := s.peek(0)
		if q == '"' && c == '\\' {
			s.advance()
			s.advance()
			continue
		}
		s.advance()
		if c == q || c == '\n' {
			return
		}
	}
}

// value passes one value at path (plain: its unindexed key), recording the
// keys of inline tables and the positions of array elements.
func (s *scanner) value(path string, plain []string) {
	switch c := s.peek(0); c {
	case '"', '\'':
		s.str()
	case '[':
		s.advance()
		for n := 0; !s.eof(); n++ {
			s.skip(true)
			if s.eof() || s.peek(0) == ']' {
				break
			}
			before := s.i
			elem := path + "[" + strconv.Itoa(n) + "]"
			s.mark(elem)
			s.value(elem, plain)
			s.skip(true)
			if s.peek(0) == ',' {
				s.advance()
			}
			if s.i == before {
				s.advance()
			}
		}
		s.advance()
	case '{':
		s.advance()
		for !s.eof() {
			s.skip(true)
			if s.eof() || s.peek(0) == '}' {
				break
			}
			before := s.i
			s.keyValue(path, plain, s.line, s.col)
			s.skip(true)
			if s.peek(0) == ',' {
				s.advance()
			}
			if s.i == before {
				s.advance()
			}
		}
		s.advance()
	default:
		start := s.i
		for !s.eof() && !strings.ContainsRune(" \t\r\n,]}#", rune(s.peek(0))) {
			s.advance()
		}
		// A local date-time may use a space instead of "T".
		tok := s.src[start:s.i]
		if len(tok) == 10 && tok[4] == '-' && tok[7] == '-' && s.peek(0) == ' ' && s.peek(1) >= '0' && s.peek(1) <= '9' {
			s.advance()
			for !s.eof() && !strings.ContainsRune(" \t\r\n,]}#", rune(s.peek(0))) {
				s.advance()
			}
		}
	}
}
