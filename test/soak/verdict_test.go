//go:build soak

package soak

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/berthd/berth/internal/testutil"
)

// verdict is what the workers' own stamps say about a world's run.
type verdict struct {
	workers  int // worker processes that stamped
	overlaps int // pairs of workers of one job alive at once
	// Sessions lost (the agents' "session lost" log lines, each naming the
	// session's last renewal), and how many of them had a worker outlive
	// the lease: a stamp at or after last renewal + TTL (the earliest
	// moment the store could expire the lease and let another agent claim
	// the job).
	losses, outlived int
	// lossesSeen counts the losses the test saw in /v1/agent (member, then
	// not), polled every 20 ms: a cross-check of the log.
	lossesSeen int
	// headroom is, over every lost session with workers, the least time
	// between its workers' last stamp and last renewal + TTL.
	headroom time.Duration
	// lateness is the most time between the local fencing deadline
	// (last renewal + TTL − max(1 s, TTL/5)) and the workers' last stamp:
	// how late, under load, the kill landed.
	lateness time.Duration
	// crashes counts the agents SIGKILLed and not started again before
	// their lease could expire (world.crashes), crashOutlived those with
	// a worker that stamped at or after last renewal + TTL, and
	// crashHeadroom is the least time between their workers' last stamp
	// and last renewal + TTL.
	crashes, crashOutlived int
	crashHeadroom          time.Duration
}

// crash is an agent SIGKILLed and not started again before its lease
// could expire (a crash without return): only its lease guard can kill
// its workers in time.
type crash struct {
	agent string
	at    time.Time // the SIGKILL: the session's workers started before
	// lastRenewal is the agent's last renewal as its last answer to the
	// test reported it: at or before the real last renewal, so last
	// renewal + TTL is at or before the lease's earliest expiry.
	lastRenewal time.Time
}

// lastOfSession is, of an agent's workers, the one that stamped last among
// those of a session that ended at end and was last renewed at
// lastRenewal: started before end, alive after lastRenewal. nil: none.
func lastOfSession(ivs []testutil.Interval, end, lastRenewal time.Time) *testutil.Interval {
	var last *testutil.Interval
	for i := range ivs {
		iv := &ivs[i]
		if iv.First < end.UnixNano() && iv.Last >= lastRenewal.UnixNano() && (last == nil || iv.Last > last.Last) {
			last = iv
		}
	}
	return last
}

// judge reads every stamp file and every agent's log and checks the two
// rules: no two workers of one job ever alive at once; and when an agent
// lost its session, every worker it had died before the lease could
// expire on the server (last renewal + TTL). It reports each breach on t
// and returns the figures.
func (w *world) judge() verdict {
	t := w.t
	v := verdict{headroom: time.Duration(1<<63 - 1), lateness: -time.Duration(1<<63 - 1), crashHeadroom: time.Duration(1<<63 - 1)}
	byAgent := map[string][]testutil.Interval{} // agent -> its workers, every job
	for _, job := range w.jobs {
		ss, err := testutil.ReadStamps(filepath.Join(w.stamps, job+".log"))
		if err != nil {
			t.Errorf("job %s: %v", job, err)
			continue
		}
		ivs := testutil.Intervals(ss)
		v.workers += len(ivs)
		for _, o := range testutil.Overlaps(ivs) {
			v.overlaps++
			t.Errorf("job %s: two workers at once: %s and %s, overlap %s", job, o[0], o[1], time.Duration(o[0].Last-o[1].First))
		}
		for _, iv := range ivs {
			a := w.ownerOf(iv.Worker)
			byAgent[a] = append(byAgent[a], iv)
		}
	}
	margin := max(time.Second, w.ttl/5)
	for _, m := range w.agents {
		v.lossesSeen += len(m.poller.losses(m.id))
		for _, l := range m.fencings() {
			v.losses++
			expiry := l.lastRenewal.Add(w.ttl)
			// Its workers of that session: started before the fencing,
			// alive after the last renewal.
			last := lastOfSession(byAgent[m.id], l.at, l.lastRenewal)
			if last == nil {
				continue // it ran nothing then
			}
			lastStamp := time.Unix(0, last.Last)
			if !lastStamp.Before(expiry) {
				v.outlived++
				t.Errorf("agent %s: worker %s stamped at %s, after its lost session's last renewal %s + TTL %s = %s",
					m.id, last, lastStamp.Format("15:04:05.000000"), l.lastRenewal.Format("15:04:05.000000"), w.ttl, expiry.Format("15:04:05.000000"))
			}
			v.headroom = min(v.headroom, expiry.Sub(lastStamp))
			v.lateness = max(v.lateness, lastStamp.Sub(l.lastRenewal.Add(w.ttl-margin)))
		}
	}
	for _, c := range w.crashes {
		v.crashes++
		last := lastOfSession(byAgent[c.agent], c.at, c.lastRenewal)
		if last == nil {
			continue
		}
		expiry := c.lastRenewal.Add(w.ttl)
		lastStamp := time.Unix(0, last.Last)
		if !lastStamp.Before(expiry) {
			v.crashOutlived++
			t.Errorf("agent %s, SIGKILLed at %s and not started again: worker %s stamped at %s, after its last renewal %s + TTL %s = %s",
				c.agent, c.at.Format("15:04:05.000000"), last, lastStamp.Format("15:04:05.000000"), c.lastRenewal.Format("15:04:05.000000"), w.ttl, expiry.Format("15:04:05.000000"))
		}
		v.crashHeadroom = min(v.crashHeadroom, expiry.Sub(lastStamp))
	}
	return v
}

// ownerOf names the agent whose cgroup root a stamp's cgroup is under.
func (w *world) ownerOf(cg string) string {
	for _, m := range w.agents {
		if strings.HasPrefix(cg, "/"+m.file.root+"/") {
			return m.id
		}
	}
	return cg
}

// rows are the verdict's figures for writeFigures.
func (v verdict) rows() [][2]string {
	dur := func(d time.Duration, none string) string {
		if d == time.Duration(1<<63-1) || d == -time.Duration(1<<63-1) {
			return none
		}
		return d.Round(time.Millisecond).String()
	}
	rows := [][2]string{
		{"worker processes that stamped", fmt.Sprint(v.workers)},
		{"overlaps (two workers of one job alive at once)", fmt.Sprint(v.overlaps)},
		{"sessions lost (\"session lost\" log lines; seen in /v1/agent)", fmt.Sprintf("%d (%d)", v.losses, v.lossesSeen)},
		{"lost sessions whose workers outlived last renewal + TTL", fmt.Sprint(v.outlived)},
		{"least headroom: last renewal + TTL − last stamp", dur(v.headroom, "—")},
		{"latest kill after the local deadline (last renewal + TTL − max(1 s, TTL/5))", dur(v.lateness, "—")},
	}
	if v.crashes == 0 {
		return rows
	}
	return append(rows,
		[2]string{"agents SIGKILLed and not started again (crash without return)", fmt.Sprint(v.crashes)},
		[2]string{"of those, with a worker that outlived last renewal + TTL", fmt.Sprint(v.crashOutlived)},
		[2]string{"least headroom after a crash: last renewal (as last reported) + TTL − last stamp", dur(v.crashHeadroom, "—")})
}

// percentile is the p-th percentile (0..100) of ds, or 0 when empty.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*p/100)]
}

// fencing is one "session lost" line of an agent's log.
type fencing struct {
	at          time.Time // the line's time: the loss was seen; the session's workers started before
	lastRenewal time.Time // of the lost session
	line        string    // the whole line, for a message
}

var (
	logTime        = regexp.MustCompile(`^time=(\S+)`)
	logLastRenewal = regexp.MustCompile(`last_renewal=(\S+)`)
)

// fencings parses the "session lost" log lines of every run of the
// member's agent; a line without its times fails the test.
func (m *member) fencings() []fencing {
	var lines []string
	for _, p := range m.procs {
		lines = append(lines, p.out.matching("session lost: fencing")...)
	}
	var out []fencing
	for _, line := range lines {
		a, b := logTime.FindStringSubmatch(line), logLastRenewal.FindStringSubmatch(line)
		if a == nil || b == nil {
			m.w.t.Errorf("agent %s: fencing line without its time or last renewal: %s", m.id, line)
			continue
		}
		at, err1 := time.Parse(time.RFC3339Nano, a[1])
		lr, err2 := time.Parse(time.RFC3339Nano, b[1])
		if err1 != nil || err2 != nil {
			m.w.t.Errorf("agent %s: fencing line with bad times (%v, %v): %s", m.id, err1, err2, line)
			continue
		}
		out = append(out, fencing{at: at, lastRenewal: lr, line: line})
	}
	return out
}
