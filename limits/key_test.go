package limits

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// The table covers Limits: every field is one key's value, read by that key
// alone, and every key reads a field.
func TestEveryFieldIsOneKey(t *testing.T) {
	typ := reflect.TypeOf(Limits{})
	seen := map[string]string{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		var l Limits
		v := reflect.ValueOf(&l).Elem().Field(i)
		switch v.Kind() {
		case reflect.Float64:
			v.SetFloat(1)
		case reflect.Int64:
			v.SetInt(int64(time.Millisecond)) // a whole µs for CPUPeriod
		case reflect.Uint64:
			v.SetUint(1)
		case reflect.String:
			v.SetString("0")
		case reflect.Slice:
			v.Set(reflect.ValueOf([]IOLimit{{Device: "/", ReadBPS: 1}}))
		default:
			t.Fatalf("field %s of kind %s", f.Name, v.Kind())
		}
		var by []string
		for _, k := range Keys() {
			if got, ok := k.Value(&l); ok {
				by = append(by, k.Name)
				if !reflect.DeepEqual(got, v.Interface()) {
					t.Errorf("key %s reads %v, field %s holds %v", k.Name, got, f.Name, v.Interface())
				}
				if k.Format(&l) == "" {
					t.Errorf("key %s formats field %s as empty", k.Name, f.Name)
				}
			}
		}
		if len(by) != 1 {
			t.Errorf("field %s is read by keys %v, want exactly one", f.Name, by)
			continue
		}
		seen[by[0]] = f.Name
	}
	for _, k := range Keys() {
		if _, ok := seen[k.Name]; !ok {
			t.Errorf("key %s reads no field of Limits", k.Name)
		}
		if k.decode == nil || k.Doc == "" || (k.Kind == KindInteger) != (k.Range != nil) || (k.Example == "") != (k.Kind == KindDevices) {
			t.Errorf("key %s: decode, Doc, a Range exactly for integers, an Example but for devices: %+v", k.Name, k)
		}
		var zero Limits
		if v, ok := k.Value(&zero); ok || k.Format(&zero) != "" {
			t.Errorf("key %s is set (%v) in zero Limits", k.Name, v)
		}
	}
}

// decode decodes every key of the table in order into l, value by key
// name, as a file that gives only those keys: the problems by key.
func decode(l *Limits, values map[string]any) map[string][]string {
	out := map[string][]string{}
	given := func(k string) bool { _, ok := values[k]; return ok }
	for _, k := range Keys() {
		v, ok := values[k.Name]
		for _, p := range k.Decode(l, Input{OK: ok, Value: v, Given: given}) {
			key := k.Name
			if p.Key != "" {
				key = p.Key
			}
			out[key] = append(out[key], p.Msg)
		}
	}
	return out
}

// memory_low is bytes > 0, at most memory and memory_high when they are
// set (a protection above the throttle or the hard limit is never
// reached); a refused value is not kept.
func TestDecodeMemoryLowBounds(t *testing.T) {
	for _, c := range []struct {
		values map[string]any
		want   string // the problem of memory_low; "" for none
		kept   int64
	}{
		{map[string]any{"memory_low": int64(1)}, "", 1},
		{map[string]any{"memory_low": int64(0)}, "must be > 0 bytes", 0},
		{map[string]any{"memory": int64(64 << 20), "memory_low": int64(64 << 20)}, "", 64 << 20},
		{map[string]any{"memory": int64(64 << 20), "memory_low": int64(64<<20 + 1)}, "67108865 bytes is above memory (67108864 bytes)", 0},
		{map[string]any{"memory_high": int64(32 << 20), "memory_low": int64(32<<20 + 1)}, "33554433 bytes is above memory_high (33554432 bytes)", 0},
		{map[string]any{"memory": int64(64 << 20), "memory_high": int64(32 << 20), "memory_low": int64(16 << 20)}, "", 16 << 20},
		// A memory refused is no bound.
		{map[string]any{"memory": int64(1), "memory_low": int64(2)}, "", 2},
	} {
		var l Limits
		ps := decode(&l, c.values)
		if got := strings.Join(ps["memory_low"], "; "); got != c.want || l.MemoryLow != c.kept {
			t.Errorf("%v: memory_low problem %q, kept %d; want %q, %d", c.values, got, l.MemoryLow, c.want, c.kept)
		}
	}
}

// A CPU quota below the kernel's minimum is cpu's problem, found once the
// period is known; a period without cpu is the period's.
func TestDecodeCPUQuotaIsCPUsProblem(t *testing.T) {
	var l Limits
	ps := decode(&l, map[string]any{"cpu": 0.005, "cpu_period": 100 * time.Millisecond})
	if len(ps["cpu"]) != 1 || !strings.Contains(ps["cpu"][0], "gives a quota of 500 µs") || l.CPU != 0 || l.CPUPeriod != 100*time.Millisecond {
		t.Errorf("problems %v, limits %+v", ps, l)
	}
	l = Limits{}
	if ps := decode(&l, map[string]any{"cpu_period": 10 * time.Millisecond}); len(ps["cpu_period"]) != 1 || ps["cpu_period"][0] != "has no effect without cpu" {
		t.Errorf("period without cpu: %v", ps)
	}
}
