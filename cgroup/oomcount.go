package cgroup

// Reading a v1 job's memory.oom_control only when an OOM kill may have
// happened since it was last read: at every scrape of thousands of jobs it
// was one file of each job's dozen, and its count rarely moves.
//
// The kernel counts every OOM kill, a cgroup's (memory limit) or the
// host's (global OOM), in one place, mm/oom_kill.c __oom_kill_process:
//
//	count_vm_event(OOM_KILL);
//	memcg_memory_event_mm(mm, MEMCG_OOM_KILL);
//
// the host's count (/proc/vmstat oom_kill, Linux ≥ 4.13 as the oom_kill
// line of memory.oom_control) and, right after it, the victim's memory
// cgroup's. So while the host's count has not moved, no group's has: a
// group's count read once the host's value was already known to be stable
// serves until the host's count changes. "Stable" is oomSettle: a group's
// read counts as complete only when the host's value it goes with was
// first seen at least that long before, so a kill counted by the host just
// before that value was read has had time to reach its cgroup (the two
// increments are adjacent statements). oomMaxAge bounds, whatever happens,
// how long a remembered count is used without a read. The host's count is
// read at most every hostOOMFresh, so a kill is seen by Usage at most that
// long after it happened (a scrape of many jobs takes longer than that
// anyway: its jobs are read one after another).

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthd/berth/internal/kernfile"
	"golang.org/x/sys/unix"
)

const (
	// oomSettle is how long after a value of the host's OOM kill count
	// was first read a group's count read with it is taken as complete.
	oomSettle = time.Second
	// oomMaxAge is how long a group's remembered OOM kill count is used
	// at most without reading its file again.
	oomMaxAge = time.Minute
	// hostOOMFresh is how long one read of /proc/vmstat serves the
	// groups that ask (one scrape of many jobs reads it a few times).
	hostOOMFresh = 100 * time.Millisecond
)

// hostOOMReading is one read of the host's OOM kill count.
type hostOOMReading struct {
	count uint64
	at    time.Time // when read
	since time.Time // when count was first read
}

// hostOOMKills is the host's OOM kill count as last read from
// /proc/vmstat, shared by every group.
type hostOOMKills struct {
	last   atomic.Pointer[hostOOMReading]
	mu     sync.Mutex // held to read /proc/vmstat
	buf    []byte
	absent atomic.Bool // no oom_kill line (kernel < 4.13): never gate
}

var hostOOM hostOOMKills

// current returns the host's OOM kill count, read again when the last
// read is older than hostOOMFresh, and when that value was first seen; ok
// is false when it cannot be known (every group's file is then read).
func (h *hostOOMKills) current(now time.Time) (count uint64, since time.Time, ok bool) {
	if h.absent.Load() {
		return 0, time.Time{}, false
	}
	if r := h.last.Load(); r != nil && now.Sub(r.at) < hostOOMFresh {
		return r.count, r.since, true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.last.Load(); r != nil && now.Sub(r.at) < hostOOMFresh {
		return r.count, r.since, true // read by another goroutine meanwhile
	}
	if h.buf == nil {
		h.buf = make([]byte, 32<<10) // /proc/vmstat: about 5 KiB on 6.x
	}
	n := [1]uint64{math.MaxUint64}
	b, err := kernfile.ReadAt(unix.AT_FDCWD, "/proc/vmstat", h.buf)
	if err == nil {
		err = kernfile.Keyed(b, ' ', oomKillKey, n[:])
		if err == nil && n[0] == math.MaxUint64 {
			h.absent.Store(true)
			return 0, time.Time{}, false
		}
	}
	if err != nil {
		h.last.Store(nil)
		return 0, time.Time{}, false
	}
	r := &hostOOMReading{count: n[0], at: now, since: now}
	if old := h.last.Load(); old != nil && old.count == n[0] {
		r.since = old.since
	}
	h.last.Store(r)
	return r.count, r.since, true
}

// knownOOMKills is a group's own OOM kill count and the host's count it
// is complete for.
type knownOOMKills struct {
	count, host uint64
	at          time.Time // when count was read
}

// ownOOMKillsV1 returns the oom_kill line of the group's v1
// memory.oom_control (d is its memory directory), remembered while the
// host's count does not move (see the top of this file).
//
// Errors: the file cannot be read or parsed.
func (g *Group) ownOOMKillsV1(d mountDir, buf []byte) (uint64, error) {
	now := time.Now()
	host, since, ok := hostOOM.current(now)
	if k := g.oom.Load(); ok && k != nil && k.host == host && now.Sub(k.at) < oomMaxAge {
		return k.count, nil
	}
	var n [1]uint64
	if err := d.keyed("memory.oom_control", buf, oomKillKey, n[:]); err != nil {
		return 0, err
	}
	if ok && now.Sub(since) >= oomSettle {
		g.oom.Store(&knownOOMKills{count: n[0], host: host, at: now})
	} else {
		g.oom.Store(nil)
	}
	return n[0], nil
}
