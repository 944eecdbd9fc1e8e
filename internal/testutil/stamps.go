package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A stamper job appends "WORKER PID UNIX-NS" to its job's file every few
// milliseconds with one write(2) in O_APPEND (lines never interleave);
// WORKER names where the process runs (its agent, or its cgroup, which
// names the agent). The tests that must show no job ever ran twice judge
// from these stamps, the workers' own account of their lives.

// Stamp is one line of a stamp file.
type Stamp struct {
	Worker string // the agent or cgroup the stamping process runs under
	PID    int
	NS     int64 // Unix nanoseconds
}

// Interval is the life of one worker process as its own stamps show it:
// from its first stamp to its last, Unix nanoseconds.
type Interval struct {
	Worker      string
	PID         int
	First, Last int64
	N           int // stamps
}

// String is "WORKER pid PID [first .. last] (N stamps)", times of day to
// the microsecond.
func (iv Interval) String() string {
	return fmt.Sprintf("%s pid %d [%s .. %s] (%d stamps)", iv.Worker, iv.PID,
		time.Unix(0, iv.First).Format("15:04:05.000000"), time.Unix(0, iv.Last).Format("15:04:05.000000"), iv.N)
}

// ReadStamps parses a stamp file. A malformed line is an error naming the
// file and line.
func ReadStamps(file string) ([]Stamp, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Stamp
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			return nil, fmt.Errorf("%s:%d: malformed stamp %q", file, n, sc.Text())
		}
		pid, err1 := strconv.Atoi(fs[1])
		ns, err2 := strconv.ParseInt(fs[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s:%d: malformed stamp %q: %w", file, n, sc.Text(), err)
		}
		out = append(out, Stamp{Worker: fs[0], PID: pid, NS: ns})
	}
	return out, sc.Err()
}

// Intervals groups stamps by process (Worker, PID) into intervals sorted by
// their first stamp.
func Intervals(ss []Stamp) []Interval {
	type key struct {
		worker string
		pid    int
	}
	m := map[key]*Interval{}
	for _, s := range ss {
		k := key{s.Worker, s.PID}
		iv, ok := m[k]
		if !ok {
			m[k] = &Interval{Worker: s.Worker, PID: s.PID, First: s.NS, Last: s.NS, N: 1}
			continue
		}
		iv.First, iv.Last, iv.N = min(iv.First, s.NS), max(iv.Last, s.NS), iv.N+1
	}
	out := make([]Interval, 0, len(m))
	for _, iv := range m {
		out = append(out, *iv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First < out[j].First })
	return out
}

// Overlaps returns every pair of intervals (sorted as Intervals returns
// them) of different processes that share a moment; touching counts.
func Overlaps(ivs []Interval) [][2]Interval {
	var out [][2]Interval
	for i := range ivs {
		for j := i + 1; j < len(ivs); j++ {
			if ivs[j].First <= ivs[i].Last {
				out = append(out, [2]Interval{ivs[i], ivs[j]})
			}
		}
	}
	return out
}
