package limits

import (
	"fmt"
	"strconv"
	"time"
)

// Kind is how a limit's value is written in a file and held in Limits.
type Kind int

// Kinds of limits.
const (
	// KindNumber is a TOML float or integer, held as a float64.
	KindNumber Kind = iota + 1
	// KindInteger is a TOML integer, held as an int64 or uint64; the
	// decoder checks it against the key's Range before Decode.
	KindInteger
	// KindBytes is a byte size (ParseBytes, or an integer number of
	// bytes), held as an int64.
	KindBytes
	// KindDuration is a Go duration string, never negative, held as a
	// time.Duration.
	KindDuration
	// KindString is a TOML string.
	KindString
	// KindDevices is an array of tables, one per device ([]IOLimit).
	KindDevices
)

// Range bounds a KindInteger key, both ends included.
type Range struct {
	Min, Max int64
	// Source names where the bounds come from ("cgroup v2 weight").
	Source string
}

// Key is one key of a limits table, a row of the table of limits: what it
// means and accepts, as the reference (docs/config.md) documents it, and
// how it is read from a file, shown, and written into a cgroup.
type Key struct {
	// Name is the key as a file writes it: "cpu_weight".
	Name string
	// Kind is how its value is written and held.
	Kind Kind
	// Unit is the unit of the value ("bytes", "cores"); "" when it has
	// none.
	Unit string
	// Default is the TOML value an absent key means, where writing it
	// changes nothing; "" when there is no such literal (see DefaultNote).
	Default string
	// DefaultNote says what an absent key means when Default does not.
	DefaultNote string
	// Range bounds a KindInteger key; nil for the others.
	Range *Range
	// Bounds says which values are accepted beyond Kind and Range.
	Bounds string
	// Example is a valid TOML value ("" for KindDevices).
	Example string
	// Doc is the key's meaning in one line, with the cgroup files it is
	// written to.
	Doc string

	// value is the key's value in l (float64, int64, uint64, string,
	// time.Duration or []IOLimit), nil when unset.
	value func(l *Limits) any
	// decode checks a file's value and keeps it in l (Decode).
	decode func(l *Limits, in Input) []Problem
	// write puts the key's resource into w (Resources); nil when another
	// key writes it (cpu_period with cpu, memory_swap with memory).
	write func(l *Limits, w *writer)
	// lift writes the kernel's default for the key's resource into w when
	// w.removed says it is taken out (Lift, Defaults); nil when it cannot
	// be lifted in place (cpuset) or is lifted with another.
	lift func(w *writer)
	// blind is true when Defaults may write the default without knowing
	// what the cgroup holds.
	blind bool
}

// Keys returns the table of limits, one Key per key of a limits table, in
// the order the reference lists them and the decoder reads them. The slice
// is shared: do not modify it.
func Keys() []Key { return keys }

// Value returns the key's value in l: a float64 (KindNumber), an int64 or
// uint64 (KindInteger), an int64 of bytes (KindBytes), a time.Duration, a
// string or a []IOLimit; false when the key is unset (zero).
func (k Key) Value(l *Limits) (any, bool) {
	v := k.value(l)
	return v, v != nil
}

// Format returns the key's value in l as a change of a configuration and
// berth validate's plan show it: cores as a decimal number ("1.5"), bytes,
// weights and counts as decimal integers, a duration in Go syntax
// ("100ms"), a string as it is, and io entries with String, "; "
// between them; "" when the key is unset.
func (k Key) Format(l *Limits) string {
	v, ok := k.Value(l)
	if !ok {
		return ""
	}
	switch v := v.(type) {
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case int64:
		return strconv.FormatInt(v, 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case time.Duration:
		return v.String()
	case []IOLimit:
		s := ""
		for i, io := range v {
			if i > 0 {
				s += "; "
			}
			s += io.String()
		}
		return s
	}
	return fmt.Sprint(v)
}

// Input is one key's value as a file gives it, for Decode.
type Input struct {
	// OK is true when the file gives the key a value of its Kind (and,
	// for KindInteger, within its Range); a wrong value is the reader's
	// problem and is not passed on.
	OK bool
	// Value is the value read, typed as Kind says: float64, int64 (both
	// KindInteger and KindBytes), time.Duration, string or []IOLimit.
	Value any
	// Given reports whether the file gives key name of the same table at
	// all, valid or not (a rule that needs another key says so only when
	// it is absent). Nil: no other key is given.
	Given func(name string) bool
	// Host is the host the limits are checked for; nil skips the checks
	// that need it.
	Host Host
}

// Host is what the bounds of cpu and cpuset need of the host that runs the
// limits (host.Host).
type Host interface {
	// NumCPU is the number of CPUs a cpu limit may use; 0: unknown.
	NumCPU() int
	// CheckCpuset parses a cpuset and checks its CPUs are online.
	CheckCpuset(s string) ([]int, error)
}

func (in Input) given(name string) bool { return in.Given != nil && in.Given(name) }

func (in Input) numCPU() int {
	if in.Host == nil {
		return 0
	}
	return in.Host.NumCPU()
}

func (in Input) checkCpuset(s string) ([]int, error) {
	if in.Host == nil {
		return ParseCPUList(s)
	}
	return in.Host.CheckCpuset(s)
}

// Problem is what is wrong with a limit's value.
type Problem struct {
	// Key is the key the problem belongs to when it is not the one being
	// decoded: another key of the same table (a CPU quota below the
	// kernel's minimum is cpu's, found when cpu_period is read); "" for
	// the key being decoded.
	Key string
	// Msg says what is wrong and what is allowed.
	Msg string
}

// problem is one Problem of the key being decoded.
func problem(format string, args ...any) []Problem {
	return []Problem{{Msg: fmt.Sprintf(format, args...)}}
}

// Decode checks in, the key's value as a file gives it, against the key's
// bounds, the host and the keys decoded before it (the table's order), and
// keeps it in l when it is valid. It is called for every key, given or
// not, in the order of Keys, since a rule may check keys read before (the
// CPU quota, when cpu_period is decoded). It returns the problems found,
// none when the value is valid or absent.
func (k Key) Decode(l *Limits, in Input) []Problem {
	return k.decode(l, in)
}
