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

// A PSI chain, fed the events and totals the kernel would give: steady
// stall, a pause, the kernel's late report of a window already counted,
// and a window skipped by the kernel's 2 s checks.
func TestObserveChain(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type ev struct {
		at    time.Time
		stall time.Duration // total
		over  bool
		held  time.Duration
	}
	for _, c := range []struct {
		name string
		rule Rule
		evs  []ev
	}{
		{
			// 40 % over 6 s in windows of 2 s: three events, 2 s apart,
			// each 800 ms of stall or more since the previous one.
			name: "steady", rule: Rule{Limit: 40, Duration: 6 * time.Second},
			evs: []ev{
				{ms(2000), 800 * time.Millisecond, false, 0},
				{ms(4010), 1700 * time.Millisecond, false, 0},
				{ms(6020), 2600 * time.Millisecond, true, 6020 * time.Millisecond},
				// Held again from there: Over after another 6 s.
				{ms(8030), 3500 * time.Millisecond, false, 0},
				{ms(10040), 4400 * time.Millisecond, false, 0},
				{ms(12050), 5300 * time.Millisecond, true, 6030 * time.Millisecond},
			},
		},
		{
			// A pause of more than 2¼ windows starts the chain again.
			name: "pause", rule: Rule{Limit: 40, Duration: 4 * time.Second},
			evs: []ev{
				{ms(2000), 800 * time.Millisecond, false, 0},
				{ms(7000), 1700 * time.Millisecond, false, 0},
				{ms(9000), 2600 * time.Millisecond, true, 4000 * time.Millisecond},
			},
		},
		{
			// The second event, a window after the first, with little
			// stall since: the first window reported late. It is not
			// counted, and the chain starts again at the next event.
			name: "late report", rule: Rule{Limit: 40, Duration: 4 * time.Second},
			evs: []ev{
				{ms(2000), 800 * time.Millisecond, false, 0},
				{ms(4000), 900 * time.Millisecond, false, 0},
				{ms(6000), 1800 * time.Millisecond, false, 0},
				{ms(8000), 2700 * time.Millisecond, true, 4000 * time.Millisecond},
			},
		},
		{
			// Unprivileged 2 s checks: an event 4 s after the previous
			// one, with the stall held over the 4 s, continues the chain.
			name: "skipped window", rule: Rule{Limit: 40, Duration: 6 * time.Second},
			evs: []ev{
				{ms(2000), 800 * time.Millisecond, false, 0},
				{ms(6000), 2500 * time.Millisecond, true, 6000 * time.Millisecond},
			},
		},
		{
			// Less than the limit on average over a stretch (here, 1 s in
			// 4 s: 25 %) starts the chain again at the window that fired.
			name: "below average", rule: Rule{Limit: 40, Duration: 6 * time.Second},
			evs: []ev{
				{ms(2000), 800 * time.Millisecond, false, 0},
				{ms(6000), 1800 * time.Millisecond, false, 0},
				{ms(8000), 2700 * time.Millisecond, false, 0},
				{ms(10000), 3600 * time.Millisecond, true, 6000 * time.Millisecond},
			},
		},
		{
			// A Duration of one window; a stall, the kernel's late report
			// of it a window later, a pause shorter than 2¼ windows, and
			// another stall: its first event is an Over.
			name: "short pause", rule: Rule{Limit: 40, Duration: 2 * time.Second},
			evs: []ev{
				{ms(3000), 800 * time.Millisecond, true, 2000 * time.Millisecond},
				{ms(5000), 850 * time.Millisecond, false, 0},
				{ms(6500), 1700 * time.Millisecond, true, 2000 * time.Millisecond},
			},
		},
		{
			// A Duration of one window: each event is an Over, except
			// the first within a window of the trigger's making.
			name: "one window", rule: Rule{Limit: 40, Duration: 2 * time.Second},
			evs: []ev{
				{ms(500), 800 * time.Millisecond, false, 0},
				{ms(2500), 1700 * time.Millisecond, true, 2500 * time.Millisecond},
				{ms(4500), 2600 * time.Millisecond, true, 2000 * time.Millisecond},
			},
		},
	} {
		s := psiState{trig: triggerFor(c.rule, true), since: t0}
		for i, e := range c.evs {
			held, share, over := s.observe(e.at, e.stall)
			if over != e.over || over && held != e.held {
				t.Errorf("%s: event %d: over %v held %v; want over %v held %v", c.name, i, over, held, e.over, e.held)
			}
			if over && (share < c.rule.Limit || share > 100) {
				t.Errorf("%s: event %d: share %.1f%%, want from the limit (%v%%) to 100%%", c.name, i, share, c.rule.Limit)
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
