//go:build soak

package soak

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// verdict is what the workers' own stamps say about a world's run.
type verdict struct {
	workers  int // worker processes that stamped
	overlaps int // pairs of workers of one job alive at once
	// Sessions lost, and how many of them had a worker outlive the lease:
	// a stamp at or after last renewal + TTL (the earliest moment the
	// store could expire the lease and let another agent claim the job).
	losses, outlived int
	// headroom is, over every lost session with workers, the least time
	// between its workers' last stamp and last renewal + TTL.
	headroom time.Duration
	// lateness is the most time between the local fencing deadline
	// (last renewal + TTL − max(1 s, TTL/5)) and the workers' last stamp:
	// how late, under load, the kill landed.
	lateness time.Duration
	// fencingsLogged is the number of "session lost" lines in the agents'
	// logs; every one must be among the losses seen.
	fencingsLogged int
}

// judge reads every stamp file and every agent's record and checks the two
// rules: no two workers of one job ever alive at once; and when an agent
// lost its session, every worker it had died before the lease could
// expire on the server (last renewal + TTL). It reports each breach on t
// and returns the figures.
func (w *world) judge() verdict {
	t := w.t
	v := verdict{headroom: time.Duration(1<<63 - 1), lateness: -time.Duration(1<<63 - 1)}
	byAgent := map[string][]interval{} // agent -> its workers, every job
	for _, job := range w.jobs {
		ss, err := readStamps(filepath.Join(w.stamps, job+".log"))
		if err != nil {
			t.Errorf("job %s: %v", job, err)
			continue
		}
		ivs := intervalsOf(ss)
		v.workers += len(ivs)
		for _, o := range overlaps(ivs) {
			v.overlaps++
			t.Errorf("job %s: two workers at once: %s and %s, overlap %s", job, o[0], o[1], time.Duration(o[0].last-o[1].first))
		}
		for _, iv := range ivs {
			a := w.ownerOf(iv.cgroup)
			byAgent[a] = append(byAgent[a], iv)
		}
	}
	margin := max(time.Second, w.ttl/5)
	for _, m := range w.agents {
		losses := m.poller.losses(m.id)
		v.losses += len(losses)
		for _, l := range losses {
			if l.lastRenewal.IsZero() {
				t.Errorf("agent %s: lost a session (seen %s) whose last renewal it never reported", m.id, l.lostSeen.Format(time.RFC3339Nano))
				continue
			}
			expiry := l.lastRenewal.Add(w.ttl)
			var last *interval
			for i := range byAgent[m.id] {
				iv := &byAgent[m.id][i]
				// Its workers of that session: started before the loss,
				// alive after the last renewal.
				if iv.first < l.lostSeen.UnixNano() && iv.last >= l.lastRenewal.UnixNano() && (last == nil || iv.last > last.last) {
					last = iv
				}
			}
			if last == nil {
				continue // it ran nothing then
			}
			lastStamp := time.Unix(0, last.last)
			if !lastStamp.Before(expiry) {
				v.outlived++
				t.Errorf("agent %s: worker %s stamped at %s, after its lost session's last renewal %s + TTL %s = %s",
					m.id, last, lastStamp.Format("15:04:05.000000"), l.lastRenewal.Format("15:04:05.000000"), w.ttl, expiry.Format("15:04:05.000000"))
			}
			v.headroom = min(v.headroom, expiry.Sub(lastStamp))
			v.lateness = max(v.lateness, lastStamp.Sub(l.lastRenewal.Add(w.ttl-margin)))
		}
	}
	for _, n := range w.fencings() {
		v.fencingsLogged += n
	}
	if v.fencingsLogged > v.losses {
		t.Errorf("the agents logged %d fencings but their API showed %d lost sessions: a loss went unseen", v.fencingsLogged, v.losses)
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
	return [][2]string{
		{"worker processes that stamped", fmt.Sprint(v.workers)},
		{"overlaps (two workers of one job alive at once)", fmt.Sprint(v.overlaps)},
		{"sessions lost (fencings logged)", fmt.Sprintf("%d (%d)", v.losses, v.fencingsLogged)},
		{"lost sessions whose workers outlived last renewal + TTL", fmt.Sprint(v.outlived)},
		{"least headroom: last renewal + TTL − last stamp", dur(v.headroom, "—")},
		{"latest kill after the local deadline (last renewal + TTL − max(1 s, TTL/5))", dur(v.lateness, "—")},
	}
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
