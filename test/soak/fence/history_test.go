package fence

import (
	"strings"
	"testing"
	"time"
)

func TestRecordLineRoundTrip(t *testing.T) {
	for _, r := range []Record{
		{Kind: Attempt, Job: "p-0", Token: "123", Run: "3f1c", RunStart: 5 * time.Second, Agent: "/berth-x-a/jobs/p-0", PID: 4242, Role: "setsid", Rule: true, At: 6 * time.Second},
		{Kind: Held, Job: "p", Token: NoToken, Run: "r", RunStart: 1, Agent: "/x", PID: 1, Role: "main", At: 2},
		{Kind: Begin, Round: 7, Fault: "host-stall", At: 99},
		{Kind: End, Round: 7, Fault: "mixed:partition-drop+leader-kill", At: 100},
	} {
		got, err := Parse(r.Line())
		if err != nil {
			t.Errorf("%q: %v", r.Line(), err)
			continue
		}
		if got != r {
			t.Errorf("%q parsed as %+v, want %+v", r.Line(), got, r)
		}
	}
}

// Fields with white space or nothing in them keep the line parseable.
func TestRecordLineSanitisesFields(t *testing.T) {
	r := Record{Kind: Attempt, Job: "a b", Token: "", Run: "x\ty", Agent: "", Role: "main", At: 1}
	got, err := Parse(r.Line())
	if err != nil {
		t.Fatal(err)
	}
	if got.Job != "a_b" || got.Token != NoToken || got.Run != "x_y" || got.Agent != "-" {
		t.Errorf("parsed %+v", got)
	}
	if _, ok := got.TokenValue(); ok {
		t.Error("an empty token has a value")
	}
}

func TestParseRejectsBadLines(t *testing.T) {
	for line, want := range map[string]string{
		"":                           "want a kind",
		"X 1 2 3":                    `kind "X"`,
		"AA j 1 r 1 a 1 main 0 1":    "want a kind",
		"A j 1 r 1 a 1 main 0":       "9 fields, want 10",
		"A j 1 r x a 1 main 0 1":     `run-start "x"`,
		"A j 1 r 1 a p main 0 1":     `pid "p"`,
		"A j 1 r 1 a 1 main 2 1":     `rule "2"`,
		"A j 1 r 1 a 1 main 1 later": `at "later"`,
		"B 1 kill":                   "3 fields, want 4",
		"B one kill 5":               `round "one"`,
		"E 1 kill soon":              `at "soon"`,
	} {
		_, err := Parse(line)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", line, err, want)
		}
	}
}

func TestTokenValue(t *testing.T) {
	for tok, want := range map[string]bool{"0": true, "18446744073709551615": true, "-": false, "-1": false, "1e3": false, "18446744073709551616": false} {
		if _, ok := (Record{Token: tok}).TokenValue(); ok != want {
			t.Errorf("token %q: ok %v, want %v", tok, ok, want)
		}
	}
}
