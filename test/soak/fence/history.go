package fence

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A history is a file of lines, each one record, in the order the kernel
// appended them (every writer opens it O_APPEND and writes a whole line
// with one write(2), which no other write interleaves): the order in which
// a resource would have received them.
//
//	A <job> <token> <run> <run-start> <agent> <pid> <role> <rule> <at>   an attempt to write
//	H <job> <token> <run> <run-start> <agent> <pid> <role> <rule> <at>   a write the claim rule held back
//	B <round> <fault> <at>                                              a fault round begins
//	E <round> <fault> <at>                                              the round ends (everything settled)
//
// <token> is the run's BERTH_FENCING_TOKEN as the job found it, "-" when
// it had none; <run> identifies one run (one start of the job's main
// process, inherited by everything it forks), <run-start> is when that
// run began; <agent> names the agent whose run it is (its BERTH_CGROUP);
// <pid> is the writing process as the host sees it; <role> says which of
// the run's processes wrote, free-form (the soak's "main/0": the process,
// and the variant of the job's command); <rule> is 1 when
// the job follows the claim rule (claim.go), else 0. <run-start> and <at>
// are CLOCK_BOOTTIME in nanoseconds: one clock for every process of the
// host, whatever its namespaces, that never jumps and counts through a
// suspend. <fault> names the round's fault kind. No field may be empty or
// hold a space.

// RecordKind is the first field of a line.
type RecordKind byte

const (
	Attempt RecordKind = 'A' // a write sent to the resource
	Held    RecordKind = 'H' // a write the job held back: its claim's deadline was too near or past
	Begin   RecordKind = 'B' // a fault round begins
	End     RecordKind = 'E' // a fault round ends
)

// NoToken is the token field of a run that had no BERTH_FENCING_TOKEN.
const NoToken = "-"

// Record is one line of a history.
type Record struct {
	Kind RecordKind
	// An attempt or a held write:
	Job      string
	Token    string        // as the job found it; NoToken for none
	Run      string        // the run's identity
	RunStart time.Duration // CLOCK_BOOTTIME when the run began
	Agent    string
	PID      int
	Role     string
	Rule     bool // the job follows the claim rule
	// Every kind:
	At time.Duration // CLOCK_BOOTTIME when written
	// A round's begin or end:
	Round int
	Fault string
}

// TokenValue is the record's token as a number; ok is false when the run
// had none or it is not a decimal integer.
func (r Record) TokenValue() (v uint64, ok bool) {
	if r.Token == NoToken {
		return 0, false
	}
	v, err := strconv.ParseUint(r.Token, 10, 64)
	return v, err == nil
}

// Line is the record as a history line, without the newline. A field
// that is empty or holds white space is written with each such character
// as "_" (an empty one as "-"), so that the line stays parseable.
func (r Record) Line() string {
	switch r.Kind {
	case Begin, End:
		return fmt.Sprintf("%c %d %s %d", r.Kind, r.Round, field(r.Fault), int64(r.At))
	default:
		rule := 0
		if r.Rule {
			rule = 1
		}
		return fmt.Sprintf("%c %s %s %s %d %s %d %s %d %d", r.Kind, field(r.Job), field(r.Token), field(r.Run),
			int64(r.RunStart), field(r.Agent), r.PID, field(r.Role), rule, int64(r.At))
	}
}

func field(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(c rune) rune {
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			return '_'
		}
		return c
	}, s)
}

// Parse reads one history line (without its newline). It returns an error
// naming the field for a line of an unknown kind, the wrong number of
// fields, or a number that does not parse.
func Parse(line string) (Record, error) {
	f := strings.Fields(line)
	if len(f) == 0 || len(f[0]) != 1 {
		return Record{}, fmt.Errorf("history line %q: want a kind A, H, B or E first", line)
	}
	r := Record{Kind: RecordKind(f[0][0])}
	num := func(name, s string) (int64, error) {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("history line %q: %s %q: want a decimal integer", line, name, s)
		}
		return v, nil
	}
	var err error
	switch r.Kind {
	case Begin, End:
		if len(f) != 4 {
			return Record{}, fmt.Errorf("history line %q: %d fields, want 4 (kind, round, fault, at)", line, len(f))
		}
		var round, at int64
		if round, err = num("round", f[1]); err != nil {
			return Record{}, err
		}
		if at, err = num("at", f[3]); err != nil {
			return Record{}, err
		}
		r.Round, r.Fault, r.At = int(round), f[2], time.Duration(at)
	case Attempt, Held:
		if len(f) != 10 {
			return Record{}, fmt.Errorf("history line %q: %d fields, want 10 (kind, job, token, run, run-start, agent, pid, role, rule, at)", line, len(f))
		}
		var start, pid, at int64
		if start, err = num("run-start", f[4]); err != nil {
			return Record{}, err
		}
		if pid, err = num("pid", f[6]); err != nil {
			return Record{}, err
		}
		if f[8] != "0" && f[8] != "1" {
			return Record{}, fmt.Errorf("history line %q: rule %q: want 0 or 1", line, f[8])
		}
		if at, err = num("at", f[9]); err != nil {
			return Record{}, err
		}
		r.Job, r.Token, r.Run, r.RunStart, r.Agent = f[1], f[2], f[3], time.Duration(start), f[5]
		r.PID, r.Role, r.Rule, r.At = int(pid), f[7], f[8] == "1", time.Duration(at)
	default:
		return Record{}, fmt.Errorf("history line %q: kind %q: want A, H, B or E", line, f[0])
	}
	return r, nil
}
