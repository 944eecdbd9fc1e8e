package fence

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseClaim(t *testing.T) {
	c, err := ParseClaim([]byte("# berth claim\ntoken=41\n\ndeadline = 5012.37\nrenewed=5010.1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 5012*time.Second + 370*time.Millisecond; c.Deadline != want || c.Token != "41" {
		t.Errorf("claim %+v, want deadline %s, token 41", c, want)
	}
	c, err = ParseClaim([]byte("deadline=7.000000001"))
	if err != nil || c.Deadline != 7*time.Second+1 {
		t.Errorf("claim %+v, %v; want 7.000000001s", c, err)
	}
	c, err = ParseClaim([]byte("deadline=12"))
	if err != nil || c.Deadline != 12*time.Second {
		t.Errorf("claim %+v, %v; want 12s", c, err)
	}
}

func TestParseClaimErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "no deadline= line",
		"token=4\n":             "no deadline= line",
		"deadline\n":            `line 1 "deadline": want key=value`,
		"x=1\ndeadline=-3\n":    "line 2: deadline",
		"deadline=1.2.3":        "at most nine decimals",
		"deadline=.5":           "at most nine decimals",
		"deadline=1.0000000001": "at most nine decimals",
		"deadline=1.+5":         "at most nine decimals",
	} {
		_, err := ParseClaim([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseClaim(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

func TestClaimAllows(t *testing.T) {
	c := Claim{Deadline: 10 * time.Second}
	margin := 500 * time.Millisecond
	for now, want := range map[time.Duration]bool{9 * time.Second: true, 9499 * time.Millisecond: true, 9500 * time.Millisecond: false, 11 * time.Second: false} {
		if got := c.Allows(now, margin); got != want {
			t.Errorf("Allows(%s) = %v, want %v", now, got, want)
		}
	}
}

func TestReadClaim(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "claim")
	if _, err := ReadClaim(p); !os.IsNotExist(err) {
		t.Errorf("missing file: %v, want not exist", err)
	}
	if err := os.WriteFile(p, []byte("deadline=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadClaim(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("bad file: %v, want an error naming %s", err, p)
	}
	if err := os.WriteFile(p, []byte("deadline=3.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := ReadClaim(p); err != nil || c.Deadline != 3500*time.Millisecond {
		t.Errorf("claim %+v, %v", c, err)
	}
}
