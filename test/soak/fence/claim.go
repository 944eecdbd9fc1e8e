package fence

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The names berth gives a run in its environment (docs/fencing.md). The
// claim file is read here as a job reads it, from its documented format
// (key=value lines, deadline= in seconds of CLOCK_BOOTTIME), not through
// berth's own code, so that the soak checks what a job would see.
const (
	TokenEnv     = "BERTH_FENCING_TOKEN" // the run's fencing token, a decimal integer
	ClaimFileEnv = "BERTH_CLAIM_FILE"    // the path of the run's claim file
)

// Claim is what a run's claim file says.
type Claim struct {
	// Deadline is the time (CLOCK_BOOTTIME) until which no other run of
	// the job can start.
	Deadline time.Duration
	// Token is the file's "token" key, "" when it has none.
	Token string
}

// Allows reports the rule a job follows before every side effect: write
// only while now (CLOCK_BOOTTIME) is before the deadline less margin (the
// time the write may take to reach the resource, and the clock's
// uncertainty).
func (c Claim) Allows(now, margin time.Duration) bool { return now < c.Deadline-margin }

// ParseClaim reads a claim file: lines of key=value, blank lines and lines
// starting with "#" ignored, unknown keys ignored. "deadline" is required:
// seconds of CLOCK_BOOTTIME with up to nine decimals, as /proc/uptime
// shows them (e.g. "5012.37"). It returns an error naming the line for a
// line without "=", a deadline that does not parse, or none at all.
func ParseClaim(b []byte) (Claim, error) {
	var c Claim
	seen := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return Claim{}, fmt.Errorf("claim file line %d %q: want key=value", n, line)
		}
		switch strings.TrimSpace(k) {
		case "deadline":
			d, err := parseSeconds(strings.TrimSpace(v))
			if err != nil {
				return Claim{}, fmt.Errorf("claim file line %d: deadline %q: %w", n, v, err)
			}
			c.Deadline, seen = d, true
		case "token":
			c.Token = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return Claim{}, fmt.Errorf("claim file: %w", err)
	}
	if !seen {
		return Claim{}, fmt.Errorf("claim file: no deadline= line")
	}
	return c, nil
}

// ReadClaim reads and parses the claim file at path.
func ReadClaim(path string) (Claim, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Claim{}, err
	}
	c, err := ParseClaim(b)
	if err != nil {
		return Claim{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// parseSeconds reads "<seconds>[.<fraction>]", exact to the nanosecond.
func parseSeconds(s string) (time.Duration, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(frac) > 9 {
		return 0, fmt.Errorf("want seconds with at most nine decimals")
	}
	sec, err := strconv.ParseUint(whole, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("want seconds with at most nine decimals")
	}
	var ns uint64
	if frac != "" {
		if ns, err = strconv.ParseUint(frac+strings.Repeat("0", 9-len(frac)), 10, 64); err != nil {
			return 0, fmt.Errorf("want seconds with at most nine decimals")
		}
	}
	return time.Duration(sec)*time.Second + time.Duration(ns), nil
}
