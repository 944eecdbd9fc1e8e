package memwatch

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

// The kernel's window and threshold for a rule, with and without
// CAP_SYS_RESOURCE; the trigger's text is what psi.rst's example writes.
func TestTriggerFor(t *testing.T) {
	for _, c := range []struct {
		rule       Rule
		privileged bool
		want       string
		hold       time.Duration
	}{
		{Rule{Limit: 10, Duration: time.Second}, true, "some 100000 1000000", time.Second},
		{Rule{Limit: 10, Duration: 500 * time.Millisecond}, true, "some 50000 500000", 500 * time.Millisecond},
		{Rule{Limit: 40, Duration: 2 * time.Second}, true, "some 800000 2000000", 2 * time.Second}, // one window: held by its event
		{Rule{Limit: 40, Duration: 30 * time.Second}, true, "some 800000 2000000", 29800 * time.Millisecond},
		// 5 s in three windows of 1⅔ s.
		{Rule{Limit: 10, Duration: 5 * time.Second}, true, "some 166667 1666666", 5*time.Second - 166666600*time.Nanosecond},
		{Rule{Limit: 100, Duration: time.Second}, true, "some 1000000 1000000", time.Second},
		{Rule{Limit: 0.00001, Duration: time.Second}, true, "some 1 1000000", time.Second}, // at least 1 µs
		// Without the capability: 2 s windows, whatever the duration.
		{Rule{Limit: 10, Duration: time.Second}, false, "some 200000 2000000", 2 * time.Second},
		{Rule{Limit: 40, Duration: 30 * time.Second}, false, "some 800000 2000000", 29800 * time.Millisecond},
	} {
		tr := triggerFor(c.rule, c.privileged)
		if tr.String() != c.want || tr.hold != c.hold {
			t.Errorf("triggerFor(%+v, privileged %v) = %q hold %v; want %q hold %v", c.rule, c.privileged, tr, tr.hold, c.want, c.hold)
		}
		if tr.window < MinDuration || tr.window > maxKernelWindow || tr.threshold <= 0 || tr.threshold > tr.window {
			t.Errorf("triggerFor(%+v): window %v, threshold %v out of the kernel's bounds", c.rule, tr.window, tr.threshold)
		}
	}
}

func TestRuleChecks(t *testing.T) {
	for _, c := range []struct {
		rule Rule
		want string // "" for no error
	}{
		{Rule{Limit: 40, Duration: 30 * time.Second}, ""},
		{Rule{Limit: 100, Duration: MinDuration}, ""},
		{Rule{Limit: 0, Duration: time.Second}, "limit 0%"},
		{Rule{Limit: -1, Duration: time.Second}, "limit"},
		{Rule{Limit: 100.5, Duration: time.Second}, "limit"},
		{Rule{Limit: 40, Duration: 499 * time.Millisecond}, "at least 500ms"},
	} {
		err := c.rule.checkPressure()
		if c.want == "" && err != nil || c.want != "" && (!errors.Is(err, ErrRule) || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("checkPressure(%+v) = %v, want %q", c.rule, err, c.want)
		}
	}
	if err := (Rule{High: 1}).checkThreshold(); err != nil {
		t.Errorf("checkThreshold with High: %v", err)
	}
	if err := (Rule{}).checkThreshold(); !errors.Is(err, ErrRule) {
		t.Errorf("checkThreshold without High: %v, want ErrRule", err)
	}
}

// A PSI chain, fed the events the kernel would give: a steady stall, a
// pause, the kernel's report of a window at its end, and a check that ran
// late without the capability.
func TestObserveChain(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type ev struct {
		at   time.Time
		over bool
		held time.Duration
	}
	for _, c := range []struct {
		name       string
		rule       Rule
		privileged bool
		evs        []ev
	}{
		{
			// 40 % over 6 s in windows of 2 s: events 2 s (and a check)
			// apart; Over at the third, and again three windows later.
			name: "steady", rule: Rule{Limit: 40, Duration: 6 * time.Second}, privileged: true,
			evs: []ev{
				{ms(2000), false, 0},
				{ms(4010), false, 0},
				{ms(6020), true, 6020 * time.Millisecond},
				{ms(8030), false, 0},
				{ms(10040), false, 0},
				{ms(12050), true, 6030 * time.Millisecond},
			},
		},
		{
			// More than 1½ windows between events starts the chain again
			// with the window before the event.
			name: "pause", rule: Rule{Limit: 40, Duration: 4 * time.Second}, privileged: true,
			evs: []ev{
				{ms(2000), false, 0},
				{ms(5100), false, 0},
				{ms(7100), true, 4000 * time.Millisecond},
			},
		},
		{
			// The first event within a window of the trigger's making:
			// the span starts at the making, not a window before.
			name: "young trigger", rule: Rule{Limit: 40, Duration: 2 * time.Second}, privileged: true,
			evs: []ev{
				{ms(500), false, 0},
				{ms(2500), true, 2500 * time.Millisecond},
				{ms(4500), true, 2000 * time.Millisecond},
			},
		},
		{
			// A window of 2 s for 1 s: the first event is an Over; the
			// kernel's report, at the window's end, of a breach in its
			// last checks is another (the error on the early side).
			name: "report at the window's end", rule: Rule{Limit: 40, Duration: time.Second}, privileged: false,
			evs: []ev{
				{ms(3000), true, 2000 * time.Millisecond},
				{ms(5010), true, 2010 * time.Millisecond},
				{ms(10000), true, 2000 * time.Millisecond},
			},
		},
		{
			// Unprivileged 2 s checks: an event 4 s after the previous
			// one (a check ran late) continues the chain; privileged, it
			// would start a new one.
			name: "late check", rule: Rule{Limit: 40, Duration: 6 * time.Second}, privileged: false,
			evs: []ev{
				{ms(2000), false, 0},
				{ms(6000), true, 6000 * time.Millisecond},
			},
		},
		{
			name: "late check, privileged", rule: Rule{Limit: 40, Duration: 6 * time.Second}, privileged: true,
			evs: []ev{
				{ms(2000), false, 0},
				{ms(6000), false, 0},
				{ms(8010), false, 0},
				{ms(10020), true, 6020 * time.Millisecond},
			},
		},
	} {
		s := psiState{trig: triggerFor(c.rule, c.privileged), since: t0}
		for i, e := range c.evs {
			held, over := s.observe(e.at)
			if over != e.over || over && held != e.held {
				t.Errorf("%s: event %d: over %v held %v; want over %v held %v", c.name, i, over, held, e.over, e.held)
			}
		}
	}
}

// merge keeps what the owner must not miss.
func TestMerge(t *testing.T) {
	over := Event{Kind: Over, Usage: 3}
	under := Event{Kind: Under, Usage: 1}
	gone := Event{Kind: Gone}
	for _, c := range []struct {
		p, e, want Event
	}{
		{over, under, over},
		{under, over, over},
		{over, Event{Kind: Over, Usage: 5}, Event{Kind: Over, Usage: 5}},
		{under, Event{Kind: Under, Usage: 0}, Event{Kind: Under, Usage: 0}},
		{over, gone, gone},
		{gone, over, gone},
		{Event{Kind: Failed}, gone, Event{Kind: Failed}},
	} {
		if got := merge(c.p, c.e); got.Kind != c.want.Kind || got.Usage != c.want.Usage {
			t.Errorf("merge(%v, %v) = %v, want %v", c.p.Kind, c.e.Kind, got.Kind, c.want.Kind)
		}
	}
}

func TestParseSome(t *testing.T) {
	avg, stall, err := parseSome([]byte("some avg10=21.92 avg60=4.90 avg300=1.06 total=3373738\nfull avg10=18.00 avg60=4.00 avg300=1.00 total=2888481\n"))
	if err != nil || avg != 21.92 || stall != 3373738*time.Microsecond {
		t.Errorf("parseSome = %v, %v, %v; want 21.92, 3.373738s", avg, stall, err)
	}
	for _, bad := range []string{
		"full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"some avg10=0.00 avg60=0.00 avg300=0.00\n",
		"some avg60=0.00 avg300=0.00 total=5\n",
		"some avg10=x avg60=0.00 avg300=0.00 total=5\n",
	} {
		if _, _, err := parseSome([]byte(bad)); err == nil {
			t.Errorf("parseSome(%q): no error", bad)
		}
	}
}

// The protocol's environment: the job's own pressure file and, Base64,
// the trigger with its NUL, as systemd writes it; windows the kernel
// accepts from an unprivileged writer.
func TestNotify(t *testing.T) {
	tgt := Target{PressureFile: "/sys/fs/cgroup/berth/jobs/orders-sink-0/memory.pressure"}
	for _, c := range []struct {
		rule Rule
		want string
	}{
		{Rule{Limit: 10, Duration: 2 * time.Second}, "some 200000 2000000"}, // systemd's default
		{Rule{Limit: 10, Duration: 500 * time.Millisecond}, "some 200000 2000000"},
		{Rule{Limit: 25, Duration: 5 * time.Second}, "some 1500000 6000000"},
		{Rule{Limit: 40, Duration: 30 * time.Second}, "some 4000000 10000000"},
	} {
		env, err := Notify(tgt, c.rule)
		if err != nil || len(env) != 2 {
			t.Fatalf("Notify(%+v) = %q, %v", c.rule, env, err)
		}
		if env[0] != "MEMORY_PRESSURE_WATCH="+tgt.PressureFile {
			t.Errorf("Notify(%+v): %q", c.rule, env[0])
		}
		b64, ok := strings.CutPrefix(env[1], "MEMORY_PRESSURE_WRITE=")
		raw, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || string(raw) != c.want+"\x00" {
			t.Errorf("Notify(%+v): %q decodes to %q, %v; want %q and a NUL", c.rule, env[1], raw, err, c.want)
		}
	}
	if _, err := Notify(Target{V1Dir: "/sys/fs/cgroup/memory/x"}, Rule{Limit: 10, Duration: time.Second}); !errors.Is(err, ErrNoPressureFile) {
		t.Errorf("Notify on a legacy host: %v, want ErrNoPressureFile", err)
	}
	if _, err := Notify(tgt, Rule{Limit: 10}); !errors.Is(err, ErrRule) {
		t.Errorf("Notify without a duration: %v, want ErrRule", err)
	}
}
