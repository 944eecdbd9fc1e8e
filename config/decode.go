package config

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berthd/berth/host"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// decoder turns the generic TOML tree (map[string]any from
// BurntSushi/toml) into the model, recording every problem with its key
// path instead of stopping at the first.
type decoder struct {
	errs problemList
	// warns are values that validate but may not mean what the operator
	// expects (a unit read otherwise by systemd, a declaration that names
	// no job).
	warns problemList
	host  *host.Host
	// read records, per section ID, every key the decoder asked for (a
	// test compares it with the reference in keys.go).
	read map[string]map[string]bool
}

// tomlType names the TOML type of a decoded value for messages.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case map[string]any:
		return "table"
	case []map[string]any:
		return "array of tables"
	case []any:
		return "array"
	default:
		return "datetime"
	}
}

// table is one TOML table being read; it remembers which keys were used so
// that the rest can be reported as unknown.
type table struct {
	d    *decoder
	path string
	// sec is the ID of the table's Section in the reference; "" for a
	// table of free names (env).
	sec  string
	m    map[string]any
	used map[string]bool
}

// open returns v at path as a table of section sec; a non-table is
// reported and gives an empty table.
func (d *decoder) open(path, sec string, v any) *table {
	m, ok := v.(map[string]any)
	if !ok && v != nil {
		d.errs.add(path, "must be a table, not %s", tomlType(v))
	}
	return &table{d: d, path: path, sec: sec, m: m, used: map[string]bool{}}
}

func (t *table) key(k string) string { return join(t.path, k) }

// get returns the value of k and marks it used.
func (t *table) get(k string) (any, bool) {
	t.used[k] = true
	if t.sec != "" && t.d.read != nil {
		if t.d.read[t.sec] == nil {
			t.d.read[t.sec] = map[string]bool{}
		}
		t.d.read[t.sec][k] = true
	}
	v, ok := t.m[k]
	return v, ok
}

// done reports every key of the table that was not read, as
// MetaData.Undecoded does, but with the indexed key path.
func (t *table) done() {
	var unknown []string
	for k := range t.m {
		if !t.used[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		t.d.errs.add(t.key(k), "%s", t.unknownKey(k))
	}
}

// unknownKey says that k is not a key of the table: with the nearest key
// of its section when one is close (didYouMean), else with every key the
// section allows.
func (t *table) unknownKey(k string) string {
	msg := fmt.Sprintf("unknown key %q", k)
	s, ok := LookupSection(t.sec)
	if !ok || len(s.Keys) == 0 {
		return msg
	}
	names := make([]string, len(s.Keys))
	for i, key := range s.Keys {
		names[i] = key.Name
	}
	if hint := didYouMean(k, names); hint != "" {
		return msg + hint
	}
	where := "here"
	if t.path == "" {
		where = "at the top level"
	} else {
		where = "in " + t.path
	}
	return fmt.Sprintf("%s; allowed %s: %s", msg, where, strings.Join(names, ", "))
}

// ref is key k of the table's section in the reference.
func (t *table) ref(k string) Key { return mustKey(t.sec, k) }

// sub returns the sub-table k, or nil when absent; its section is the one
// the reference gives k.
func (t *table) sub(k string) *table {
	v, ok := t.get(k)
	if !ok {
		return nil
	}
	sec := ""
	if t.sec != "" {
		sec = t.ref(k).Section
	}
	return t.d.open(t.key(k), sec, v)
}

func (t *table) wrongType(k string, v any, want string) {
	t.d.errs.add(t.key(k), "must be %s, not %s", want, tomlType(v))
}

func (t *table) str(k string, def string) string {
	v, ok := t.get(k)
	if !ok {
		return def
	}
	s, ok := v.(string)
	if !ok {
		t.wrongType(k, v, "a string")
		return def
	}
	t.nul(t.key(k), s)
	return strings.Clone(s) // not a slice of the whole document, kept alive by it
}

// nul reports a string with a NUL byte at key: every string berth takes
// from a file ends up in a path, an argument or an environment entry,
// which the kernel reads as a C string ending at the first NUL (nulMsg).
func (t *table) nul(key, s string) {
	if strings.ContainsRune(s, 0) {
		t.d.errs.add(key, "%s", nulMsg)
	}
}

func (t *table) integer(k string, def int64) int64 {
	v, ok := t.get(k)
	if !ok {
		return def
	}
	n, ok := v.(int64)
	if !ok {
		t.wrongType(k, v, "an integer")
		return def
	}
	return n
}

// number reads a float or an integer.
func (t *table) number(k string) (float64, bool) {
	v, ok := t.get(k)
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			t.d.errs.add(t.key(k), "must be a finite number, not %v", n)
			return 0, false
		}
		return n, true
	case int64:
		return float64(n), true
	}
	t.wrongType(k, v, "a number")
	return 0, false
}

// bytes reads a byte size: a string with a unit (ParseBytes) or an
// integer number of bytes.
func (t *table) bytes(k string) (int64, bool) {
	v, ok := t.get(k)
	if !ok {
		return 0, false
	}
	switch n := v.(type) {
	case string:
		b, err := limits.ParseBytes(n)
		if err != nil {
			t.d.errs.add(t.key(k), "%v", err)
			return 0, false
		}
		if w := siUnitWarning(n, b); w != "" {
			t.d.warns.add(t.key(k), "%s", w)
		}
		return b, true
	case int64:
		if n < 0 {
			t.d.errs.add(t.key(k), "byte size %d is negative", n)
			return 0, false
		}
		return n, true
	}
	t.wrongType(k, v, `a byte size (a string like "512MiB" or an integer number of bytes)`)
	return 0, false
}

// siUnitWarning explains a byte size written with a one-letter unit (K,
// M, G, T): berth reads those as powers of 1000 (SI), while systemd's
// MemoryMax= and friends read them as powers of 1024 (systemd.resource-
// control(5)), so "1G" is 10^9 bytes here and 2^30 there. It returns ""
// for every other unit.
func siUnitWarning(s string, b int64) string {
	num := strings.TrimRight(s, "KMGT")
	unit := s[len(num):]
	num = strings.TrimRight(num, " ")
	exp := strings.Index("KMGT", unit) + 1
	if len(unit) != 1 || exp == 0 {
		return ""
	}
	var systemd string
	if v, err := limits.ParseBytes(num + unit + "iB"); err == nil {
		systemd = fmt.Sprintf("%d bytes (%s × 2^%d)", v, num, 10*exp)
	} else {
		systemd = fmt.Sprintf("%s × 2^%d bytes", num, 10*exp)
	}
	return fmt.Sprintf("%q is %d bytes (%s × 10^%d): K, M, G, T are powers of 1000 here, but systemd reads %q as %s; write %q for that, or %q to keep %d bytes",
		s, b, num, 3*exp, s, systemd, num+unit+"iB", num+[]string{"kB", "MB", "GB", "TB"}[exp-1], b)
}

// duration reads a Go duration string (time.ParseDuration), >= 0; def
// when it is absent or wrong.
func (t *table) duration(k string, def time.Duration) time.Duration {
	if d, ok := t.durationOK(k); ok {
		return d
	}
	return def
}

// durationOK is duration, false when k is absent or wrong (reported).
func (t *table) durationOK(k string) (time.Duration, bool) {
	v, ok := t.get(k)
	if !ok {
		return 0, false
	}
	s, ok := v.(string)
	if !ok {
		t.wrongType(k, v, `a duration string like "10s"`)
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.d.errs.add(t.key(k), "invalid duration %q (Go duration syntax, e.g. \"1m30s\", \"500ms\")", s)
		return 0, false
	}
	if d < 0 {
		t.d.errs.add(t.key(k), "duration %q is negative", s)
		return 0, false
	}
	return d, true
}

// strings reads an array of strings.
func (t *table) strings(k string) []string {
	v, ok := t.get(k)
	if !ok {
		return nil
	}
	a, ok := v.([]any)
	if !ok {
		t.wrongType(k, v, "an array of strings")
		return nil
	}
	out := make([]string, 0, len(a))
	for i, e := range a {
		s, ok := e.(string)
		if !ok {
			t.d.errs.add(fmt.Sprintf("%s[%d]", t.key(k), i), "must be a string, not %s", tomlType(e))
			continue
		}
		t.nul(fmt.Sprintf("%s[%d]", t.key(k), i), s)
		out = append(out, strings.Clone(s)) // as str
	}
	return out
}

// tables reads an array of tables ([[x]] or [{...}, ...]).
func (t *table) tables(k string) []*table {
	v, ok := t.get(k)
	if !ok {
		return nil
	}
	var elems []any
	switch a := v.(type) {
	case []map[string]any:
		for _, m := range a {
			elems = append(elems, m)
		}
	case []any:
		elems = a
	default:
		t.wrongType(k, v, "an array of tables")
		return nil
	}
	sec := t.ref(k).Section
	out := make([]*table, len(elems))
	for i, e := range elems {
		out[i] = t.d.open(fmt.Sprintf("%s[%d]", t.key(k), i), sec, e)
	}
	return out
}

// oneOf reads k, a string that must be one of the values the reference
// lists for it, described as what ("a log sink"); def when absent or
// wrong.
func (t *table) oneOf(k, what, def string) string {
	v, ok := t.m[k]
	if !ok {
		t.get(k)
		return def
	}
	s := t.str(k, def)
	if _, isStr := v.(string); !isStr {
		return def
	}
	allowed := t.ref(k).Values
	for _, a := range allowed {
		if s == a {
			return s
		}
	}
	t.d.errs.add(t.key(k), "%q is not %s (allowed: %s)", s, what, strings.Join(allowed, ", "))
	return def
}

// signal reads the stop signal k (ParseSignal), with def when it is absent
// or wrong; a wrong one is a problem listing the reference's Values.
func (t *table) signal(k string, def spec.Signal) spec.Signal {
	v, ok := t.m[k]
	if !ok {
		t.get(k)
		return def
	}
	s := t.str(k, "")
	if _, isStr := v.(string); !isStr {
		return def
	}
	sig, ok := spec.ParseSignal(s)
	if !ok {
		t.d.errs.add(t.key(k), "%q is not a stop signal (allowed: %s), each with or without its SIG prefix", s, strings.Join(t.ref(k).Values, ", "))
		return def
	}
	return sig
}

// inRange reads the integer k and checks it against the reference's Range
// for k; ok is false when k is absent or wrong.
func (t *table) inRange(k string) (n int64, ok bool) {
	v, set := t.m[k]
	if !set {
		t.get(k)
		return 0, false
	}
	n = t.integer(k, 0)
	if _, isInt := v.(int64); !isInt {
		return 0, false
	}
	r := t.ref(k).Range
	if n < r.Min || n > r.Max {
		src := ""
		if r.Source != "" {
			src = " (" + r.Source + ")"
		}
		t.d.errs.add(t.key(k), "must be between %d and %d%s, not %d", r.Min, r.Max, src, n)
		return 0, false
	}
	return n, true
}

// checkName reports s at key unless it is a valid cgroup directory name
// and job ID: [A-Za-z0-9][A-Za-z0-9._-]*, at most 128 bytes.
func (d *decoder) checkName(key, what, s string) bool {
	if err := validName(s); err != nil {
		d.errs.add(key, "%s %v", what, err)
		return false
	}
	return true
}

// validName is the rule for connector, group and agent names and job IDs.
func validName(s string) error {
	if s == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(s) > spec.MaxNameLen {
		return fmt.Errorf("%q is longer than %d bytes", s, spec.MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("%q is not a valid name (allowed: [A-Za-z0-9][A-Za-z0-9._-]*, at most %d bytes)", s, spec.MaxNameLen)
		}
	}
	return nil
}

// limitsTable reads a limits table (a job's or a group's): each key of the
// table of limits (limits.Keys) read as its Kind says, in the table's
// order, then checked and kept by its row (Key.Decode).
func (d *decoder) limitsTable(t *table) limits.Limits {
	var l limits.Limits
	if t == nil {
		return l
	}
	defer t.done()
	given := func(k string) bool { _, ok := t.m[k]; return ok }
	for _, k := range limits.Keys() {
		in := limits.Input{Given: given, Host: d.host}
		in.Value, in.OK = d.limitValue(t, k)
		for _, p := range k.Decode(&l, in) {
			key := k.Name
			if p.Key != "" {
				key = p.Key
			}
			d.errs.add(t.key(key), "%s", p.Msg)
		}
	}
	return l
}

// limitValue reads limit k of t as its Kind says; false when it is absent
// or its value is wrong (reported).
func (d *decoder) limitValue(t *table, k limits.Key) (any, bool) {
	switch k.Kind {
	case limits.KindNumber:
		return t.number(k.Name)
	case limits.KindInteger:
		return t.inRange(k.Name)
	case limits.KindBytes:
		return t.bytes(k.Name)
	case limits.KindDuration:
		return t.durationOK(k.Name)
	case limits.KindString:
		v, ok := t.m[k.Name]
		s := t.str(k.Name, "")
		_, isStr := v.(string)
		return s, ok && isStr
	case limits.KindDevices:
		_, ok := t.m[k.Name]
		return d.ioTables(t, k.Name), ok
	}
	panic("config: limit " + k.Name + " of no known kind")
}

// ioTables reads the io entries k of a limits table.
func (d *decoder) ioTables(t *table, k string) []limits.IOLimit {
	var out []limits.IOLimit
	for i, e := range t.tables(k) {
		key := fmt.Sprintf("%s[%d]", t.key(k), i)
		var io limits.IOLimit
		io.Device = e.str("device", "")
		if _, ok := e.m["device"]; !ok {
			d.errs.add(key, "device is required")
		} else if io.Device == "" {
			d.errs.add(e.key("device"), "must not be empty")
		} else if err := d.host.CheckDevice(io.Device); err != nil {
			d.errs.add(e.key("device"), "%v", err)
		}
		rate := func(k string, bytes bool) int64 {
			var n int64
			var ok bool
			if bytes {
				n, ok = e.bytes(k)
			} else if v, set := e.m[k]; set {
				n = e.integer(k, 0)
				_, ok = v.(int64)
			}
			if ok && n < 1 {
				d.errs.add(e.key(k), "must be >= 1, not %d", n)
				return 0
			}
			return n
		}
		io.ReadBPS = rate("read_bps", true)
		io.WriteBPS = rate("write_bps", true)
		io.ReadIOPS = rate("read_iops", false)
		io.WriteIOPS = rate("write_iops", false)
		e.done()
		set := false
		for _, k := range []string{"read_bps", "write_bps", "read_iops", "write_iops"} {
			if _, ok := e.m[k]; ok {
				set = true
			}
		}
		if !set && e.m != nil {
			d.errs.add(key, "sets no limit (give read_bps, write_bps, read_iops or write_iops)")
		}
		out = append(out, io)
	}
	return out
}

// process reads [connector.run] or [connector.task].
func (d *decoder) process(t *table) *spec.Process {
	if t == nil {
		return nil
	}
	defer t.done()
	p := &spec.Process{Restart: spec.DefaultRestart}
	if v, ok := t.m["command"]; !ok {
		d.errs.add(t.path, "command is required")
	} else if _, isArr := v.([]any); !isArr {
		if s, isStr := v.(string); isStr {
			t.get("command")
			d.errs.add(t.key("command"), "must be an array of strings (argv), not a string: %s", suggestArgv(s))
		} else {
			t.strings("command")
		}
	} else {
		p.Command = t.strings("command")
		switch {
		case len(p.Command) == 0:
			d.errs.add(t.key("command"), "must not be empty")
		case p.Command[0] == "":
			d.errs.add(t.key("command")+"[0]", "program must not be an empty string")
		}
		for i, arg := range p.Command {
			if strings.ContainsRune(arg, 0) {
				continue // reported by strings
			}
			if _, err := spec.Expand(arg, nil); err != nil {
				d.errs.add(fmt.Sprintf("%s[%d]", t.key("command"), i), "%v", err)
			}
		}
	}
	if env := t.sub("env"); env != nil {
		p.Env = map[string]string{}
		names := make([]string, 0, len(env.m))
		for k := range env.m {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			v := env.str(k, "")
			switch {
			case strings.ContainsRune(k, 0):
				d.errs.addQuoted(env.path, k, "name %s", nulMsg)
			case k == "" || strings.Contains(k, "="):
				d.errs.addQuoted(env.path, k, "is not a valid environment variable name")
			case spec.ReservedEnv(k):
				d.errs.add(env.key(k), "is set by berth for every job and cannot be overridden")
			case strings.ContainsRune(v, 0):
				// reported by str
			default:
				p.Env[strings.Clone(k)] = v // as str
			}
		}
		env.done()
	}
	if _, ok := t.m["env_file"]; ok {
		p.EnvFile = t.str("env_file", "")
		if !strings.ContainsRune(p.EnvFile, 0) && !strings.HasPrefix(p.EnvFile, "/") {
			d.errs.add(t.key("env_file"), "must be an absolute path, not %q", p.EnvFile)
		}
	}
	p.User = t.str("user", "")
	if _, ok := t.m["user"]; ok && !strings.ContainsRune(p.User, 0) {
		if err := checkUser(p.User); err != nil {
			d.errs.add(t.key("user"), "%v", err)
		}
	}
	// working_directory, as systemd's WorkingDirectory=; "dir" is its older
	// name and still read, so that files and stored definitions that use
	// it keep working.
	_, hasWD := t.get("working_directory")
	_, hasDir := t.get("dir")
	dirKey := ""
	switch {
	case hasWD && hasDir:
		t.str("dir", "")
		d.errs.add(t.key("dir"), "is the older name of working_directory: set only working_directory")
		dirKey = "working_directory"
	case hasWD:
		dirKey = "working_directory"
	case hasDir:
		dirKey = "dir"
	}
	if dirKey != "" {
		p.Dir = t.str(dirKey, "")
		if _, isStr := t.m[dirKey].(string); isStr && !strings.ContainsRune(p.Dir, 0) && !strings.HasPrefix(p.Dir, "/") {
			d.errs.add(t.key(dirKey), "must be an absolute path, not %q", p.Dir)
		}
	}
	p.Restart = spec.Restart(t.oneOf("restart", "a restart policy", string(spec.DefaultRestart)))
	p.StopTimeout = t.duration("stop_timeout", 0)
	p.KillMode = spec.KillMode(t.oneOf("kill_mode", "a kill mode", ""))
	p.KillSignal = t.signal("kill_signal", "")
	p.MemoryPressure = d.pressure(t)
	p.Limits = d.limitsTable(t.sub("limits"))
	if msg := d.host.CheckPressure(p); msg != "" {
		d.errs.add(t.key("memory_pressure"), "%s", msg)
	}
	for _, pp := range d.host.CheckProcess(p, host.ProcessEnv(p)) {
		if pp.Key == "working_directory" {
			// the key as the file wrote it: working_directory or dir
			pp.Key = dirKey
		}
		d.errs.add(t.key(pp.Key), "%s", pp.Msg)
	}
	return p
}

// pressure reads a process's memory_pressure, memory_pressure_limit and
// memory_pressure_duration (spec.PressureRule; bounds in the reference).
// Absent keys take their defaults; a limit or duration with
// memory_pressure none is kept and does nothing.
func (d *decoder) pressure(t *table) spec.PressureRule {
	r := spec.PressureRule{Action: spec.MemoryPressure(t.oneOf("memory_pressure", "a memory pressure action", string(spec.PressureNone))),
		Limit: spec.DefaultPressureLimit, Duration: spec.DefaultPressureDuration}
	if v, ok := t.number("memory_pressure_limit"); ok {
		if v <= 0 || v > 100 {
			d.errs.add(t.key("memory_pressure_limit"), "must be more than 0 and at most 100 (percent of wall time stalled), not %v", v)
		} else {
			r.Limit = v
		}
	}
	if v, ok := t.durationOK("memory_pressure_duration"); ok {
		if v < spec.MinPressureDuration || v > spec.MaxPressureDuration {
			d.errs.add(t.key("memory_pressure_duration"), "must be at least %s (the kernel's shortest PSI trigger window, Documentation/accounting/psi.rst) and at most %s, not %s",
				spec.MinPressureDuration, spec.MaxPressureDuration, v)
		} else {
			r.Duration = v
		}
	}
	return r
}

// nulMsg is the problem of a string with a NUL byte: arguments,
// environment entries and paths reach the kernel as C strings, which end
// at the first NUL byte, so no string of a berth file may hold one.
const nulMsg = "must not contain a NUL byte (exec(2) and the kernel's paths take C strings, which end at the first NUL)"

// suggestArgv says how to write a command given as one string: split on
// blanks into argv, or, when the string needs a shell (quotes, pipes,
// redirections, variables, globs), run it with /bin/sh -c.
func suggestArgv(s string) string {
	if strings.ContainsAny(s, "|&;<>()$`\\\"'*?[]#~") {
		return fmt.Sprintf("it needs a shell: write [\"/bin/sh\", \"-c\", %q]", s)
	}
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return "write the program and each argument as its own string"
	}
	q := make([]string, len(fields))
	for i, f := range fields {
		q[i] = strconv.Quote(f)
	}
	return fmt.Sprintf("write each argument as its own string: [%s]", strings.Join(q, ", "))
}

// checkUser checks the syntax of "user" or "user:group".
func checkUser(s string) error {
	if strings.ContainsRune(s, 0) {
		return errors.New(nulMsg)
	}
	parts := strings.Split(s, ":")
	if len(parts) > 2 {
		return fmt.Errorf("%q must be \"user\" or \"user:group\"", s)
	}
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, " \t\n/\x00") {
			return fmt.Errorf("%q must be \"user\" or \"user:group\" (names or numeric IDs)", s)
		}
	}
	return nil
}

// group reads one [[group]].
func (d *decoder) group(t *table) spec.Group {
	defer t.done()
	g := spec.Group{Name: t.str("name", "")}
	if _, ok := t.m["name"]; !ok {
		d.errs.add(t.path, "name is required")
	} else {
		if d.checkName(t.key("name"), "group name", g.Name) {
			if err := checkCgroupName(g.Name); err != nil {
				d.errs.add(t.key("name"), "group name %v", err)
			}
		}
	}
	g.Limits = d.limitsTable(t.sub("limits"))
	return g
}

// connector reads one [[connector]].
func (d *decoder) connector(t *table) spec.Connector {
	defer t.done()
	c := spec.Connector{Name: t.str("name", "")}
	if _, ok := t.m["name"]; !ok {
		d.errs.add(t.path, "name is required")
	} else {
		if d.checkName(t.key("name"), "connector name", c.Name) {
			if err := checkCgroupName(c.Name); err != nil {
				d.errs.add(t.key("name"), "connector name %v", err)
			}
		}
	}
	if n, ok := t.inRange("tasks"); ok {
		c.Tasks = int(n)
	}
	if _, ok := t.m["group"]; ok {
		c.Group = t.str("group", "")
		if c.Group == "" {
			d.errs.add(t.key("group"), "must not be empty (omit it for no group)")
		}
	}
	c.Run = d.process(t.sub("run"))
	c.Task = d.process(t.sub("task"))
	if c.Tasks > 0 && c.Task == nil {
		if _, ok := t.m["task"]; !ok {
			d.errs.add(t.path, "[connector.task] is required when tasks > 0")
		}
	}
	if c.Tasks > 0 && c.Name != "" && validName(c.Name) == nil {
		if last := spec.TaskID(c.Name, c.Tasks-1); len(last) > spec.MaxNameLen {
			d.errs.add(t.key("name"), "task job ID %q is longer than %d bytes", last, spec.MaxNameLen)
		}
	}
	return c
}

// workload reads the [[group]] and [[connector]] arrays of root and checks
// the rules that span them.
func (d *decoder) workload(root *table) spec.Workload {
	var w spec.Workload
	for _, g := range root.tables("group") {
		w.Groups = append(w.Groups, d.group(g))
	}
	for _, c := range root.tables("connector") {
		w.Connectors = append(w.Connectors, d.connector(c))
	}
	checkWorkload(&w, &d.errs)
	return w
}
