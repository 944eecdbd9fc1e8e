package kernfile

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// The parsers on contents in the shapes the kernel writes them
// (Documentation/admin-guide/cgroup-v2.rst "Interface Files", v1
// memory.oom_control, proc(5)): they run without root, so a parser change
// is caught on any host.

func TestUint(t *testing.T) {
	for _, c := range []struct {
		text    string
		want    uint64
		wantErr bool
	}{
		{"1048576\n", 1048576, false},
		{"max\n", 0, false}, // memory.max, pids.max with no limit
		{" 7 ", 7, false},
		{"0", 0, false},
		{"18446744073709551615", 1<<64 - 1, false}, // v1 "unlimited" memory
		{"18446744073709551616", 0, true},
		{"-1", 0, true},
		{"12 34", 0, true},
		{"", 0, true},
	} {
		v, err := Uint([]byte(c.text))
		if (err != nil) != c.wantErr || v != c.want {
			t.Errorf("Uint(%q) = %d, %v; want %d, error %v", c.text, v, err, c.want, c.wantErr)
		}
	}
	if _, err := Uint([]byte("18446744073709551616")); !errors.Is(err, strconv.ErrRange) {
		t.Errorf("Uint above 2^64-1: %v, want strconv.ErrRange", err)
	}
}

func TestKeyed(t *testing.T) {
	// cgroup v2 memory.events, the last line without its newline.
	events := []byte("low 0\nhigh 12\nmax 40\noom 3\noom_kill 2\noom_group_kill 0")
	keys := []string{"oom", "oom_kill", "oom_group_kill", "low", "oom_k", "absent"}
	out := []uint64{99, 99, 99, 99, 99, 99}
	if err := Keyed(events, ' ', keys, out); err != nil {
		t.Fatal(err)
	}
	want := []uint64{3, 2, 0, 0, 99, 99} // whole keys only; absent ones untouched
	for i := range keys {
		if out[i] != want[i] {
			t.Errorf("memory.events %s = %d, want %d", keys[i], out[i], want[i])
		}
	}

	cpuStat := []byte("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 100\nnr_throttled 7\nthrottled_usec 35000\n")
	var v [2]uint64
	if err := Keyed(cpuStat, ' ', []string{"usage_usec", "nr_throttled"}, v[:]); err != nil || v != [2]uint64{2500000, 7} {
		t.Errorf("cpu.stat usage_usec, nr_throttled = %v, %v; want [2500000 7]", v, err)
	}
	// v1 memory.oom_control (its oom_kill line exists since Linux 4.13).
	v = [2]uint64{}
	if err := Keyed([]byte("oom_kill_disable 1\nunder_oom 0\noom_kill 5\n"), ' ', []string{"oom_kill"}, v[:1]); err != nil || v[0] != 5 {
		t.Errorf("memory.oom_control oom_kill = %d, %v; want 5 (not oom_kill_disable)", v[0], err)
	}
	// /proc/PID/status: "key:<tab>value", other lines not numbers.
	status := []byte("Name:\tsh\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n")
	v = [2]uint64{}
	if err := Keyed(status, ':', []string{"voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"}, v[:]); err != nil || v != [2]uint64{12, 3} {
		t.Errorf("/proc/PID/status context switches = %v, %v; want [12 3]", v, err)
	}

	err := Keyed([]byte("usage_usec many\n"), ' ', []string{"usage_usec"}, v[:1])
	if err == nil || !strings.Contains(err.Error(), "usage_usec") {
		t.Errorf("a value that is not a number: %v, want an error naming the key", err)
	}
}

func TestNested(t *testing.T) {
	// cgroup v2 io.stat: two devices, one with discard fields.
	ioStat := []byte("8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n8:0 rbytes=90430464 wbytes=299008000 rios=8950 wios=1252\n")
	var r, w uint64
	err := Nested(ioStat, func(dev, fields []byte) error {
		rb, _, err1 := Field(fields, "rbytes")
		wb, _, err2 := Field(fields, "wbytes")
		r, w = r+rb, w+wb
		return errors.Join(err1, err2)
	})
	if err != nil || r != 1459200+90430464 || w != 314773504+299008000 {
		t.Errorf("io.stat summed rbytes %d wbytes %d, %v", r, w, err)
	}
	// cpu.pressure: avg fields are not integers and are not asked for.
	psi := []byte("some avg10=0.00 avg60=1.50 avg300=0.00 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n")
	got := map[string]uint64{}
	if err := Nested(psi, func(kind, fields []byte) error {
		v, found, err := Field(fields, "total")
		if !found {
			t.Errorf("%s: no total", kind)
		}
		got[string(kind)] = v
		return err
	}); err != nil || got["some"] != 123456 || got["full"] != 7 {
		t.Errorf("cpu.pressure totals %v, %v", got, err)
	}
	if _, found, _ := Field([]byte("avg10=0.00 total_x=5"), "total"); found {
		t.Error("Field matched a longer key")
	}
	if _, _, err := Field([]byte("total=lots"), "total"); err == nil || !strings.Contains(err.Error(), "total") {
		t.Errorf("a field that is not a number: %v", err)
	}
	stop := errors.New("stop")
	n := 0
	if err := Nested([]byte("a x=1\nb x=2\n"), func(_, _ []byte) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Errorf("Nested did not stop at fn's error: %v after %d lines", err, n)
	}
}

// CutLine splits at the first newline; the last line may lack one.
func TestCutLine(t *testing.T) {
	for _, c := range []struct{ in, line, rest string }{
		{"a\nb\n", "a", "b\n"}, {"a", "a", ""}, {"\n", "", ""}, {"", "", ""},
	} {
		line, rest := CutLine([]byte(c.in))
		if string(line) != c.line || string(rest) != c.rest {
			t.Errorf("CutLine(%q) = %q, %q; want %q, %q", c.in, line, rest, c.line, c.rest)
		}
	}
}
