package kernfile

import (
	"bytes"
	"fmt"
	"strconv"
)

// Uint parses a single decimal value, ignoring surrounding white space.
// "max", which a cgroup limit file holds when there is no limit
// (cgroup-v2.rst "Conventions"), reads as 0: berth reports an absent
// limit as 0.
//
// Errors: anything else that is not an unsigned decimal number, or one
// above 2^64-1 (strconv.ErrRange).
func Uint(b []byte) (uint64, error) {
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return 0, nil
	}
	if len(b) == 0 {
		return 0, fmt.Errorf("parse %q: not a number", b)
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("parse %q: not a number", b)
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, fmt.Errorf("parse %q: %w", b, strconv.ErrRange)
		}
		v = v*10 + d
	}
	return v, nil
}

// Keyed parses a flat keyed file: one key per line, its value after the
// first sep on the line (' ' for cgroup files such as cpu.stat and
// memory.events, ':' for /proc/PID/status and /proc/PID/io). For each
// keys[i] found, out[i] is set to its value (Uint); a key the file lacks
// leaves out[i] as it was. Keys are matched whole: "oom" is not
// "oom_kill". out must be at least as long as keys.
//
// Errors: the value of a wanted key is not a number (naming the key).
func Keyed(b []byte, sep byte, keys []string, out []uint64) error {
	for len(b) > 0 {
		var line []byte
		line, b = CutLine(b)
		i := bytes.IndexByte(line, sep)
		if i < 0 {
			continue
		}
		k := line[:i]
		for j, key := range keys {
			if string(k) == key {
				v, err := Uint(line[i+1:])
				if err != nil {
					return fmt.Errorf("key %s: %w", key, err)
				}
				out[j] = v
				break
			}
		}
	}
	return nil
}

// Nested calls fn for every line of a nested keyed file, with the line's
// first word (a device "MAJ:MIN" in io.stat, "some" or "full" in a
// pressure file) and the rest of the line ("rbytes=... wbytes=...",
// "avg10=... total=..."), for Field to pick from. Empty lines are
// skipped. It stops at the first error fn returns and returns it.
func Nested(b []byte, fn func(name, fields []byte) error) error {
	for len(b) > 0 {
		var line []byte
		line, b = CutLine(b)
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		name, rest, _ := bytes.Cut(line, []byte{' '})
		if err := fn(name, rest); err != nil {
			return err
		}
	}
	return nil
}

// Field returns the value of key in fields, the "KEY=VALUE ..." part of a
// nested keyed line (Nested); found is false when no field is named key.
//
// Errors: the value is not a number (Uint), naming the key.
func Field(fields []byte, key string) (v uint64, found bool, err error) {
	for len(fields) > 0 {
		f := fields
		if i := bytes.IndexByte(fields, ' '); i >= 0 {
			f, fields = fields[:i], fields[i+1:]
		} else {
			fields = nil
		}
		if len(f) > len(key) && f[len(key)] == '=' && string(f[:len(key)]) == key {
			v, err := Uint(f[len(key)+1:])
			if err != nil {
				return 0, true, fmt.Errorf("field %s: %w", key, err)
			}
			return v, true, nil
		}
	}
	return 0, false, nil
}

// CutLine splits b at its first newline: the line before it (without the
// newline) and the rest after it; with no newline, all of b and nil.
func CutLine(b []byte) (line, rest []byte) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:]
	}
	return b, nil
}
